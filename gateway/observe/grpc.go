package observe

import "github.com/hashicorp/go-metrics/prometheus"

// metricGRPCRequests counts gRPC calls by listener, protocol, upstream,
// HTTP status class (code, as impulse_requests records it) and gRPC status
// (grpc_status: the canonical code name).
var metricGRPCRequests = []string{"grpc", "requests"}

var grpcCounters = []prometheus.CounterDefinition{
	{Name: metricGRPCRequests, Help: "gRPC calls handled, by listener, protocol, upstream, HTTP status class (code) and gRPC status (grpc_status, e.g. OK, UNAVAILABLE)."},
}

// grpcKey is one impulse_grpc_requests series.
type grpcKey struct{ listener, protocol, upstream, code, grpcStatus string }

func (k grpcKey) upstreamName() string { return k.upstream }

func (k grpcKey) emit(gm *Metrics, d uint64) {
	gm.m.IncrCounterWithLabels(metricGRPCRequests, float32(d), labels("listener", k.listener, "protocol", k.protocol,
		"upstream", k.upstream, "code", k.code, "grpc_status", k.grpcStatus))
}

// grpcRequest counts one gRPC call: one atomic add, as request does.
func (gm *Metrics) grpcRequest(listener, protocol, upstream string, status int, grpcStatus string) {
	add(&gm.grpcCalls, grpcKey{listener, protocol, upstream, StatusClass(status), grpcStatus})
}

// GRPCRequests is the count of one impulse_grpc_requests series.
func (gm *Metrics) GRPCRequests(listener, protocol, upstream, code, grpcStatus string) uint64 {
	return load(&gm.grpcCalls, grpcKey{listener, protocol, upstream, code, grpcStatus})
}

package gateway

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-metrics"
)

// metricGRPCRequests counts gRPC calls by listener, protocol, upstream,
// HTTP status class (code, as impulse_requests records it) and gRPC status
// (grpc_status: the canonical code name, grpcOutcome).
var metricGRPCRequests = []string{"grpc", "requests"}

// grpcKey is one impulse_grpc_requests series.
type grpcKey struct{ listener, protocol, upstream, code, grpcStatus string }

// grpcCount is one grpcKey's count, the part already flushed, and when it
// was last handed to go-metrics (flushMu guards touched).
type grpcCount struct {
	n, flushed atomic.Uint64
	touched    time.Time
}

// grpcRequest counts one gRPC call: one atomic add on the request path, as
// request does.
func (gm *gatewayMetrics) grpcRequest(listener, protocol, upstream string, status int, grpcStatus string) {
	key := grpcKey{listener, protocol, upstream, statusClass(status), grpcStatus}
	c, ok := gm.grpcCalls.Load(key)
	if !ok {
		c, _ = gm.grpcCalls.LoadOrStore(key, new(grpcCount))
	}
	c.(*grpcCount).n.Add(1)
}

// flushGRPC hands the gRPC call counts since the last flush to go-metrics,
// keeping idle series of live upstreams alive and forgetting those of
// removed ones as flush does. flushMu is held.
func (gm *gatewayMetrics) flushGRPC(now time.Time, live func(upstream string) bool) {
	gm.grpcCalls.Range(func(k, v any) bool {
		key, c := k.(grpcKey), v.(*grpcCount)
		n := c.n.Load()
		d := n - c.flushed.Load()
		if d == 0 {
			switch {
			case key.upstream != "" && !live(key.upstream):
				if now.Sub(c.touched) > forgetAfter {
					gm.grpcCalls.Delete(k)
				}
				return true
			case now.Sub(c.touched) < touchEvery:
				return true
			}
		}
		c.flushed.Store(n)
		c.touched = now
		gm.m.IncrCounterWithLabels(metricGRPCRequests, float32(d), []metrics.Label{
			{Name: "listener", Value: key.listener}, {Name: "protocol", Value: key.protocol}, {Name: "upstream", Value: key.upstream},
			{Name: "code", Value: key.code}, {Name: "grpc_status", Value: key.grpcStatus},
		})
		return true
	})
}

package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/go-metrics/prometheus"
)

// Metric keys, relative to the go-metrics service name (the agent uses
// "impulse", so Prometheus shows impulse_requests and so on).
var (
	metricRequests          = []string{"requests"}
	metricRequestDuration   = []string{"request", "duration"}
	metricQUICConns         = []string{"quic", "connections"}
	metricHealthTransitions = []string{"backend", "health", "transitions"}
	metricInFlight          = []string{"upstream", "in_flight"}
	metricEligible          = []string{"upstream", "backends", "eligible"}
)

// Definitions describe the gateway's metrics for the Prometheus sink, with
// help text and names relative to the service name. Durations are
// milliseconds.
var (
	CounterDefinitions = []prometheus.CounterDefinition{
		{Name: metricRequests, Help: "Requests handled, by listener, upstream, status class (code) and gateway reason."},
		{Name: metricHealthTransitions, Help: "Backend health transitions, by upstream, kind (health, ejected, returned) and resulting active status."},
	}
	SummaryDefinitions = []prometheus.SummaryDefinition{
		{Name: metricRequestDuration, Help: "Request duration in milliseconds, from request headers to the end of the response."},
	}
	GaugeDefinitions = []prometheus.GaugeDefinition{
		{Name: metricQUICConns, Help: "Active QUIC connections per listener."},
		{Name: metricInFlight, Help: "Requests in flight to the backends of an upstream, sampled every second."},
		{Name: metricEligible, Help: "Backends of an upstream that may receive traffic now, sampled every second."},
	}
)

type gatewayMetrics struct {
	m     *metrics.Metrics
	conns sync.Map // listener name → *atomic.Int64
}

func newGatewayMetrics(m *metrics.Metrics) *gatewayMetrics {
	if m == nil {
		m, _ = metrics.New(metrics.DefaultConfig("impulse"), &metrics.BlackholeSink{})
	}
	return &gatewayMetrics{m: m}
}

func (gm *gatewayMetrics) request(listener, upstream string, status int, reason string, d time.Duration) {
	labels := []metrics.Label{
		{Name: "listener", Value: listener},
		{Name: "upstream", Value: upstream},
		{Name: "code", Value: statusClass(status)},
		{Name: "reason", Value: reason},
	}
	gm.m.IncrCounterWithLabels(metricRequests, 1, labels)
	gm.m.MeasureSinceWithLabels(metricRequestDuration, time.Now().Add(-d), labels[:3])
}

func (gm *gatewayMetrics) connOpened(listener string) { gm.connDelta(listener, 1) }
func (gm *gatewayMetrics) connClosed(listener string) { gm.connDelta(listener, -1) }

func (gm *gatewayMetrics) connDelta(listener string, d int64) {
	v, _ := gm.conns.LoadOrStore(listener, new(atomic.Int64))
	n := v.(*atomic.Int64).Add(d)
	gm.m.SetGaugeWithLabels(metricQUICConns, float32(n), []metrics.Label{{Name: "listener", Value: listener}})
}

// sampleUpstreams sets the per-upstream gauges every interval until ctx is
// done. Sampling keeps gauge updates off the request path.
func (g *Gateway) sampleUpstreams(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for name, u := range g.table.Load().upstreams {
			var inFlight int64
			eligible := 0
			for _, b := range u.Current().Backends {
				inFlight += b.InFlight()
				if b.Eligible() {
					eligible++
				}
			}
			l := []metrics.Label{{Name: "upstream", Value: name}}
			g.metrics.m.SetGaugeWithLabels(metricInFlight, float32(inFlight), l)
			g.metrics.m.SetGaugeWithLabels(metricEligible, float32(eligible), l)
		}
	}
}

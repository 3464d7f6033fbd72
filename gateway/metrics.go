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
	// requests counts per label set on the hot path without go-metrics'
	// label handling; flush hands the deltas to go-metrics (every second
	// and before every scrape).
	requests sync.Map // requestKey → *requestCount
	flushMu  sync.Mutex
}

type requestKey struct{ listener, upstream, code, reason string }

type requestCount struct {
	n, flushed atomic.Uint64
}

func newGatewayMetrics(m *metrics.Metrics) *gatewayMetrics {
	if m == nil {
		cfg := metrics.DefaultConfig("impulse")
		cfg.EnableRuntimeMetrics = false // its collector goroutine would outlive the gateway
		m, _ = metrics.New(cfg, &metrics.BlackholeSink{})
	}
	return &gatewayMetrics{m: m}
}

func (gm *gatewayMetrics) request(listener, upstream string, status int, reason string, d time.Duration) {
	code := statusClass(status)
	key := requestKey{listener, upstream, code, reason}
	c, ok := gm.requests.Load(key)
	if !ok {
		c, _ = gm.requests.LoadOrStore(key, new(requestCount))
	}
	c.(*requestCount).n.Add(1)
	gm.m.AddSampleWithLabels(metricRequestDuration, float32(d.Nanoseconds())/1e6, []metrics.Label{
		{Name: "listener", Value: listener}, {Name: "upstream", Value: upstream}, {Name: "code", Value: code},
	})
}

// flush adds the request counts since the last flush to go-metrics.
func (gm *gatewayMetrics) flush() {
	gm.flushMu.Lock()
	defer gm.flushMu.Unlock()
	gm.requests.Range(func(k, v any) bool {
		key, c := k.(requestKey), v.(*requestCount)
		n := c.n.Load()
		if d := n - c.flushed.Load(); d > 0 {
			c.flushed.Store(n)
			gm.m.IncrCounterWithLabels(metricRequests, float32(d), []metrics.Label{
				{Name: "listener", Value: key.listener}, {Name: "upstream", Value: key.upstream},
				{Name: "code", Value: key.code}, {Name: "reason", Value: key.reason},
			})
		}
		return true
	})
}

func (gm *gatewayMetrics) connOpened(listener string) { gm.connDelta(listener, 1) }
func (gm *gatewayMetrics) connClosed(listener string) { gm.connDelta(listener, -1) }

func (gm *gatewayMetrics) connDelta(listener string, d int64) {
	v, _ := gm.conns.LoadOrStore(listener, new(atomic.Int64))
	n := v.(*atomic.Int64).Add(d)
	gm.m.SetGaugeWithLabels(metricQUICConns, float32(n), []metrics.Label{{Name: "listener", Value: listener}})
}

// FlushMetrics hands counters aggregated on the request path to go-metrics
// at once; the agent calls it before serving a scrape. They are also flushed
// every second.
func (g *Gateway) FlushMetrics() { g.metrics.flush() }

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
		g.metrics.flush()
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

package gateway

import (
	"context"
	"strconv"
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
	metricDurationBucket    = []string{"request", "duration", "bucket"}
	metricDurationSum       = []string{"request", "duration", "sum"}
	metricDurationCount     = []string{"request", "duration", "count"}
	metricQUICConns         = []string{"quic", "connections"}
	metricTCPConns          = []string{"tcp", "connections"}
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
		{Name: metricTunnelBytes, Help: "Bytes relayed through tunnels (WebSocket and other upgrades), by listener, upstream and direction (to_backend, to_client)."},
		{Name: metricGRPCRequests, Help: "gRPC calls handled, by listener, protocol, upstream, HTTP status class (code) and gRPC status (grpc_status, e.g. OK, UNAVAILABLE)."},
		{Name: metricHealthTransitions, Help: "Backend health transitions, by upstream, kind (health, ejected, returned) and resulting active status."},
		{Name: metricRateLimited, Help: "Requests refused with 429 by a rate limit, by listener, upstream (the routed one) and scope (listener or upstream: whose rate_limit refused)."},
		{Name: metricLimitOverloaded, Help: "Requests answered 503 overloaded, by the scope of the concurrency limit they met (global, upstream, backend) and the upstream they were routed to."},
		{Name: metricRetries, Help: "Requests sent again to another backend, by upstream and reason (the retry condition: connect-failure, refused-stream, reset, 502, 503, 504)."},
		{Name: metricBudgetExhausted, Help: "Retries and hedges not sent because the upstream's retry budget was spent, by upstream."},
		{Name: metricHedges, Help: "Hedged copies of slow requests sent, by upstream."},
		{Name: metricHedgesWon, Help: "Hedged copies whose answer was relayed (the first answer), by upstream."},
		{Name: metricAccessLogDropped, Help: "Access log lines dropped because the writer fell behind (its buffer was full)."},
		{Name: metricAccessLogErrors, Help: "Access log lines lost because writing them failed (a full disk, a closed pipe)."},
	}
	// The duration histogram (request_duration_bucket{le}, _sum, _count, ms)
	// has no definition: go-metrics would add an unlabelled zero series, a
	// bucket without le that histogram_quantile() cannot place.
	// SummaryDefinitions is empty: the request duration is a histogram.
	SummaryDefinitions []prometheus.SummaryDefinition
	GaugeDefinitions   = []prometheus.GaugeDefinition{
		{Name: metricQUICConns, Help: "Active QUIC connections per listener."},
		{Name: metricTCPConns, Help: "Open TCP connections (HTTP/1.1 and HTTP/2 over TLS) per listener."},
		{Name: metricTunnels, Help: "Open tunnels (WebSocket and other upgrades), by listener, upstream and upgrade protocol."},
		{Name: metricInFlight, Help: "Requests in flight to the backends of an upstream, sampled every second."},
		{Name: metricEligible, Help: "Backends of an upstream that may receive traffic now, sampled every second."},
		{Name: metricLimitInFlight, Help: "Requests holding a slot of a concurrency limit, by scope (global; upstream; backend: the busiest backend) and upstream, sampled every second."},
		{Name: metricLimitMax, Help: "The concurrency limit of a scope (global, upstream, backend) and upstream (0: none), sampled every second."},
		{Name: metricLimitQueue, Help: "Requests waiting in an upstream's queue for a slot (limits.max_queue), sampled every second."},
	}
)

type gatewayMetrics struct {
	m     *metrics.Metrics
	conns sync.Map // connKey → *atomic.Int64
	// requests counts and times requests per label set on the hot path
	// without go-metrics' label handling; flush hands the deltas to
	// go-metrics (every second and before every scrape).
	requests       sync.Map // requestKey → *requestCount
	grpcCalls      sync.Map // grpcKey → *grpcCount (grpcmetrics.go)
	rateLimits     sync.Map // rateLimitedKey → *rateLimitedCount (ratelimits.go)
	flushMu        sync.Mutex
	tunnels        tunnelCounts // tunnelmetrics.go
	tunnelMu       sync.Mutex   // one byte flush at a time
	overloadCounts              // limitmetrics.go
	attemptCounts  sync.Map     // attemptKey → *attemptCount (retrymetrics.go)

	accessLog accessLogCounts // accesslog.go
}

type requestKey struct{ listener, protocol, upstream, code, reason string }

// connKey is one connection gauge: the metric (QUIC or TCP) and listener.
type connKey struct {
	tcp      bool
	listener string
}

// durationBounds are the histogram's upper bounds in µs (the le labels are
// in ms: 1 ms to 10 s, Prometheus' default buckets with 1 and 2.5 ms added
// for a gateway next to its backends).
var durationBounds = [...]int64{1e3, 2.5e3, 5e3, 10e3, 25e3, 50e3, 100e3, 250e3, 500e3, 1e6, 2.5e6, 5e6, 10e6}

var durationLabels = func() (l [len(durationBounds) + 1]string) {
	for i, b := range durationBounds {
		l[i] = strconv.FormatFloat(float64(b)/1e3, 'f', -1, 64)
	}
	l[len(durationBounds)] = "+Inf"
	return l
}()

// requestCount is one label set's request histogram: a count per bucket
// (not cumulative; the last is above every bound) and the total µs, with
// the values already flushed.
type requestCount struct {
	buckets, flushedBuckets [len(durationBounds) + 1]atomic.Uint64
	sumUs, flushedSumUs     atomic.Uint64
	touched                 time.Time // last handed to go-metrics; flushMu guards it
}

// touchEvery is how often flush re-emits (by 0) the series of label sets
// without traffic whose upstream still exists. go-metrics' Prometheus sink
// drops a series not updated for telemetry.prometheus_retention (default
// 60 s); a counter that vanishes and comes back at 1 breaks rate() and
// increase() for rare events such as an occasional 5xx. Series of removed
// upstreams still expire, and their entries are dropped after forgetAfter.
const (
	touchEvery  = 10 * time.Second
	forgetAfter = time.Hour
)

// durationKey labels the duration histogram: reason is left out.
type durationKey struct{ listener, protocol, upstream, code string }

// durationDelta accumulates one flush's histogram deltas for a durationKey.
type durationDelta struct {
	buckets [len(durationBounds) + 1]uint64
	sumUs   uint64
}

func newGatewayMetrics(m *metrics.Metrics) *gatewayMetrics {
	if m == nil {
		cfg := metrics.DefaultConfig("impulse")
		cfg.EnableRuntimeMetrics = false // its collector goroutine would outlive the gateway
		m, _ = metrics.New(cfg, &metrics.BlackholeSink{})
	}
	return &gatewayMetrics{m: m}
}

// request counts one request and its duration: two atomic adds. A
// go-metrics summary here (a label filter, a key build and a locked
// quantile stream per request) cost 1.5 µs and 10 allocations per request
// (BenchmarkHandlerPrometheus).
func (gm *gatewayMetrics) request(listener, protocol, upstream string, status int, reason string, d time.Duration) {
	key := requestKey{listener, protocol, upstream, statusClass(status), reason}
	c, ok := gm.requests.Load(key)
	if !ok {
		c, _ = gm.requests.LoadOrStore(key, new(requestCount))
	}
	rc := c.(*requestCount)
	us := d.Microseconds()
	i := 0
	for i < len(durationBounds) && us > durationBounds[i] {
		i++
	}
	rc.buckets[i].Add(1)
	rc.sumUs.Add(uint64(max(us, 0)))
}

// flush adds the request counts and durations since the last flush to
// go-metrics: impulse_requests per requestKey, and per durationKey the
// cumulative impulse_request_duration_bucket{le} counters with _sum (ms)
// and _count, the Prometheus histogram convention. Label sets without
// traffic are re-emitted every touchEvery while live(upstream) holds (the
// empty upstream, requests with no route, always does).
func (gm *gatewayMetrics) flush(now time.Time, live func(upstream string) bool) {
	gm.flushTunnelBytes()
	gm.flushMu.Lock()
	defer gm.flushMu.Unlock()
	deltas := map[durationKey]*durationDelta{}
	gm.requests.Range(func(k, v any) bool {
		key, c := k.(requestKey), v.(*requestCount)
		dk := durationKey{key.listener, key.protocol, key.upstream, key.code}
		var n uint64
		dd := deltas[dk]
		for i := range c.buckets {
			b := c.buckets[i].Load()
			d := b - c.flushedBuckets[i].Load()
			if d == 0 {
				continue
			}
			c.flushedBuckets[i].Store(b)
			n += d
			if dd == nil {
				dd = &durationDelta{}
				deltas[dk] = dd
			}
			dd.buckets[i] += d
		}
		if n == 0 {
			switch {
			case key.upstream != "" && !live(key.upstream):
				if now.Sub(c.touched) > forgetAfter {
					gm.requests.Delete(k)
				}
				return true
			case now.Sub(c.touched) < touchEvery:
				return true
			}
			if dd == nil {
				deltas[dk] = &durationDelta{} // touch the histogram too
			}
		} else {
			sum := c.sumUs.Load()
			dd.sumUs += sum - c.flushedSumUs.Load()
			c.flushedSumUs.Store(sum)
		}
		c.touched = now
		gm.m.IncrCounterWithLabels(metricRequests, float32(n), []metrics.Label{
			{Name: "listener", Value: key.listener}, {Name: "protocol", Value: key.protocol}, {Name: "upstream", Value: key.upstream},
			{Name: "code", Value: key.code}, {Name: "reason", Value: key.reason},
		})
		return true
	})
	for k, dd := range deltas {
		labels := []metrics.Label{{Name: "listener", Value: k.listener}, {Name: "protocol", Value: k.protocol}, {Name: "upstream", Value: k.upstream}, {Name: "code", Value: k.code}}
		// Every bucket is touched, even by 0, so each histogram has its full
		// set of le series and they expire together (prometheus_retention).
		var cum uint64
		for i, d := range dd.buckets {
			cum += d
			gm.m.IncrCounterWithLabels(metricDurationBucket, float32(cum), append(labels, metrics.Label{Name: "le", Value: durationLabels[i]}))
		}
		gm.m.IncrCounterWithLabels(metricDurationSum, float32(dd.sumUs)/1e3, labels)
		gm.m.IncrCounterWithLabels(metricDurationCount, float32(cum), labels)
	}
	gm.flushGRPC(now, live)
	gm.flushRateLimited(now, live)
	gm.flushOverloads(now, live)
	gm.flushAttempts(now, live)
	gm.flushAccessLog(now)
}

// connDelta adds d to a listener's connection gauge: TCP connections when
// tcp is set, else QUIC ones.
func (gm *gatewayMetrics) connDelta(tcp bool, listener string, d int64) {
	key := connKey{tcp: tcp, listener: listener}
	v, _ := gm.conns.LoadOrStore(key, new(atomic.Int64))
	gm.setConns(key, v.(*atomic.Int64).Add(d))
}

func (gm *gatewayMetrics) setConns(key connKey, n int64) {
	metric := metricQUICConns
	if key.tcp {
		metric = metricTCPConns
	}
	gm.m.SetGaugeWithLabels(metric, float32(n), []metrics.Label{{Name: "listener", Value: key.listener}})
}

// sampleConns re-sets the connection gauges, so that a listener whose
// connections do not change keeps its series (see touchEvery).
func (gm *gatewayMetrics) sampleConns() {
	gm.conns.Range(func(k, v any) bool {
		gm.setConns(k.(connKey), v.(*atomic.Int64).Load())
		return true
	})
}

// FlushMetrics hands counters aggregated on the request path to go-metrics
// at once; the agent calls it before serving a scrape. They are also flushed
// every second.
func (g *Gateway) FlushMetrics() { g.metrics.flush(time.Now(), g.liveUpstream) }

// liveUpstream reports whether the current route table has the upstream.
func (g *Gateway) liveUpstream(name string) bool {
	_, ok := g.table.Load().upstreams[name]
	return ok
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
		g.metrics.flush(time.Now(), g.liveUpstream)
		g.metrics.sampleConns()
		g.metrics.sampleTunnels()
		g.sampleTLS(time.Now())
		g.sampleLimits()
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

// flushedCount is a counter of the request path that flush hands to
// go-metrics as deltas: one atomic add per event; flushMu guards touched
// (when its series was last emitted).
type flushedCount struct {
	n, flushed atomic.Uint64
	touched    time.Time
}

// due is what a flush at now does with c: the delta to emit (emit), or
// nothing, or (forget) drop the series of an upstream that is gone (live
// false) once idle for forgetAfter. An idle series of a live upstream is
// emitted with 0 every touchEvery, so it stays (see flush). flushMu is held.
func (c *flushedCount) due(now time.Time, live bool) (d uint64, emit, forget bool) {
	n := c.n.Load()
	d = n - c.flushed.Load()
	if d == 0 {
		if !live {
			return 0, false, now.Sub(c.touched) > forgetAfter
		}
		if now.Sub(c.touched) < touchEvery {
			return 0, false, false
		}
	}
	c.flushed.Store(n)
	c.touched = now
	return d, true, false
}

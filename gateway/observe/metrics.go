// Package observe holds the observers of the request pipeline: every
// request ends in one Outcome (outcome.go), which its metrics, access-log
// line, trace span, status-page counters and passive health are all fed
// from, so they never disagree about a status. Each metric family keeps
// its keys, counters and Prometheus definitions in a file of its own;
// this file holds what they share: the Metrics value and its flush.
package observe

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/hashicorp/go-metrics/prometheus"
)

// Definitions describe the gateway's metrics for the Prometheus sink, with
// help text and names relative to the go-metrics service name (the agent
// uses "impulse", so Prometheus shows impulse_requests and so on).
// Durations are milliseconds. Each family declares its own (requests.go,
// conns.go, ...).
var (
	CounterDefinitions = slices.Concat(requestCounters, tunnelCounters, grpcCounters, healthCounters,
		limitCounters, attemptCounters, accessLogCounters, authCounters, clientAddrCounters, connectCounters)
	// SummaryDefinitions is empty: the request duration is a histogram,
	// which has no definition (requests.go).
	SummaryDefinitions []prometheus.SummaryDefinition
	GaugeDefinitions   = slices.Concat(connGauges, tunnelGauges, upstreamGauges, limitGauges)
)

// Metrics are the gateway's metric families. Counters on the request path
// are atomic adds on per-label-set values, handed to go-metrics as deltas
// by Flush (every second, and before every scrape): a go-metrics call per
// request (a label filter, a key build, a locked update) cost 1.5 µs and
// 10 allocations (BenchmarkHandlerPrometheus).
type Metrics struct {
	m *metrics.Metrics

	flushMu    sync.Mutex // one flush at a time; guards every touched
	conns      sync.Map   // connKey → *atomic.Int64 (conns.go)
	requests   sync.Map   // requestKey → *requestCount (requests.go)
	grpcCalls  sync.Map   // grpcKey → *flushedCount (grpc.go)
	rateLimits sync.Map   // rateLimitedKey → *flushedCount (limits.go)
	overloads  sync.Map   // overloadKey → *flushedCount (limits.go)
	attempts   sync.Map   // attemptKey → *flushedCount (attempts.go)
	auths      sync.Map   // authKey → *flushedCount (auth.go)
	// connectAuths: connectKey → *flushedCount (connect.go)
	connectAuths sync.Map
	tunnels      tunnelCounts
	tunnelMu     sync.Mutex // one byte flush at a time (tunnels.go)
	accessLog    accessLogCounts

	proxyRefused sync.Map     // proxyRefusedKey → *flushedCount (clientaddr.go)
	samples      gaugeSamples // the sampled gauges' last values (samples.go)
}

// NewMetrics returns the families over m (nil: a blackhole sink, for
// tests and embedding).
func NewMetrics(m *metrics.Metrics) *Metrics {
	if m == nil {
		cfg := metrics.DefaultConfig("impulse")
		cfg.EnableRuntimeMetrics = false // its collector goroutine would outlive the gateway
		m, _ = metrics.New(cfg, &metrics.BlackholeSink{})
	}
	return &Metrics{m: m}
}

// Sink is the go-metrics value the families write to.
func (gm *Metrics) Sink() *metrics.Metrics { return gm.m }

// touchEvery is how often Flush re-emits (by 0) the series of label sets
// without traffic whose upstream still exists. go-metrics' Prometheus sink
// drops a series not updated for telemetry.prometheus_retention (default
// 60 s); a counter that vanishes and comes back at 1 breaks rate() and
// increase() for rare events such as an occasional 5xx. Series of removed
// upstreams still expire, and their entries are dropped after forgetAfter.
const (
	touchEvery  = 10 * time.Second
	forgetAfter = time.Hour
)

// Flush adds the counts since the last flush to go-metrics. Label sets
// without traffic are re-emitted every touchEvery while live(upstream)
// holds (the empty upstream, requests with no route, always does).
func (gm *Metrics) Flush(now time.Time, live func(upstream string) bool) {
	gm.flushTunnelBytes()
	gm.flushMu.Lock()
	defer gm.flushMu.Unlock()
	gm.flushRequests(now, live)
	for _, m := range []*sync.Map{&gm.grpcCalls, &gm.rateLimits, &gm.overloads, &gm.attempts, &gm.auths, &gm.proxyRefused, &gm.connectAuths} {
		gm.flushCounts(m, now, live)
	}
	gm.flushAccessLog(now)
}

// flushedCount is a counter of the request path that Flush hands to
// go-metrics as deltas: one atomic add per event; flushMu guards touched
// (when its series was last emitted).
type flushedCount struct {
	n, flushed atomic.Uint64
	touched    time.Time
}

// due is what a flush at now does with c: the delta to emit (emit), or
// nothing, or (forget) drop the series of an upstream that is gone (live
// false) once idle for forgetAfter. An idle series of a live upstream is
// emitted with 0 every touchEvery, so it stays. flushMu is held.
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

// series is the label set of a flushedCount family: the upstream it
// belongs to ("" for none, always live) and how it hands a delta to
// go-metrics.
type series interface {
	upstreamName() string
	emit(gm *Metrics, d uint64)
}

// countKey is a series usable as a sync.Map key.
type countKey interface {
	comparable
	series
}

// add counts one event under key in m: an atomic add once the key exists.
func add[K countKey](m *sync.Map, key K) {
	c, ok := m.Load(key)
	if !ok {
		c, _ = m.LoadOrStore(key, new(flushedCount))
	}
	c.(*flushedCount).n.Add(1)
}

// load is key's total in m (0 when never counted).
func load[K countKey](m *sync.Map, key K) uint64 {
	if c, ok := m.Load(key); ok {
		return c.(*flushedCount).n.Load()
	}
	return 0
}

// flushCounts hands each series' delta to emit, keeping idle series of
// live upstreams alive and forgetting those of removed ones. flushMu is
// held.
func (gm *Metrics) flushCounts(m *sync.Map, now time.Time, live func(string) bool) {
	m.Range(func(k, v any) bool {
		key := k.(series)
		up := key.upstreamName()
		d, ok, forget := v.(*flushedCount).due(now, up == "" || live(up))
		if forget {
			m.Delete(k)
		}
		if ok {
			key.emit(gm, d)
		}
		return true
	})
}

var statusClasses = [...]string{"", "1xx", "2xx", "3xx", "4xx", "5xx"}

// StatusClass is the code label: "2xx" and so on, the exact code outside
// 100..599 (499, logged only, is "4xx").
func StatusClass(code int) string {
	if code < 100 || code > 599 {
		return strconv.Itoa(code)
	}
	return statusClasses[code/100]
}

func labels(kv ...string) []metrics.Label {
	l := make([]metrics.Label, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		l = append(l, metrics.Label{Name: kv[i], Value: kv[i+1]})
	}
	return l
}

func labelOf(name, value string) metrics.Label { return metrics.Label{Name: name, Value: value} }

package gateway

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-metrics"
)

// Concurrency-limit metric keys (see metrics.go for the others). The
// gauges are sampled every second, off the request path:
//
//	impulse_limit_in_flight{scope,upstream}  requests holding a slot
//	impulse_limit_max{scope,upstream}        the limit (0: none)
//	impulse_limit_queue_depth{upstream}      requests waiting in line
//	impulse_limit_overloaded{scope,upstream} counter of 503 overloaded
//
// scope is "global" (upstream ""; always reported), "upstream" (for
// upstreams with max_requests) or "backend" (for upstreams with
// max_requests_per_backend: in_flight is then the busiest backend's
// count). The counter's upstream is the one the refused request was
// routed to, whatever the scope.
var (
	metricLimitInFlight   = []string{"limit", "in_flight"}
	metricLimitMax        = []string{"limit", "max"}
	metricLimitQueue      = []string{"limit", "queue_depth"}
	metricLimitOverloaded = []string{"limit", "overloaded"}
)

// overloadKey labels one overloaded counter.
type overloadKey struct{ scope, upstream string }

// overloadCount is one counter: the total and what was flushed of it.
type overloadCount struct {
	total, flushed atomic.Uint64
	touched        time.Time // last handed to go-metrics; overloadMu guards it
}

// overloadCounts are the overloaded counters of a gatewayMetrics.
type overloadCounts struct {
	overloads  sync.Map   // overloadKey → *overloadCount
	overloadMu sync.Mutex // one flush at a time
}

// overload counts one request refused over the limit of scope.
func (gm *gatewayMetrics) overload(scope, upstream string) {
	key := overloadKey{scope, upstream}
	v, ok := gm.overloads.Load(key)
	if !ok {
		v, _ = gm.overloads.LoadOrStore(key, new(overloadCount))
	}
	v.(*overloadCount).total.Add(1)
}

// flushOverloads hands the refusals counted since the last call to
// go-metrics, and re-emits quiet counters of live upstreams every
// touchEvery (see there).
func (gm *gatewayMetrics) flushOverloads(now time.Time, live func(upstream string) bool) {
	gm.overloadMu.Lock()
	defer gm.overloadMu.Unlock()
	gm.overloads.Range(func(k, v any) bool {
		key, c := k.(overloadKey), v.(*overloadCount)
		total := c.total.Load()
		d := total - c.flushed.Load()
		if d == 0 && (now.Sub(c.touched) < touchEvery || !live(key.upstream)) {
			return true
		}
		c.flushed.Store(total)
		c.touched = now
		gm.m.IncrCounterWithLabels(metricLimitOverloaded, float32(d), []metrics.Label{
			{Name: "scope", Value: key.scope}, {Name: "upstream", Value: key.upstream}})
		return true
	})
}

// sampleLimits sets the concurrency-limit gauges.
func (g *Gateway) sampleLimits() {
	gm := g.metrics.m
	set := func(scope, upstream string, inFlight int64, limit int) {
		l := []metrics.Label{{Name: "scope", Value: scope}, {Name: "upstream", Value: upstream}}
		gm.SetGaugeWithLabels(metricLimitInFlight, float32(inFlight), l)
		gm.SetGaugeWithLabels(metricLimitMax, float32(limit), l)
	}
	set(scopeGlobal, "", g.global.InFlight(), g.global.Limits().Max)
	tbl := g.table.Load()
	for name, u := range tbl.upstreams {
		if l := tbl.limiters[name]; l.Limits().Max > 0 {
			set(scopeUpstream, name, l.InFlight(), l.Limits().Max)
			gm.SetGaugeWithLabels(metricLimitQueue, float32(l.Waiting()), []metrics.Label{{Name: "upstream", Value: name}})
		}
		if m := u.MaxRequestsPerBackend(); m > 0 {
			var busiest int64
			for _, b := range u.Current().Backends {
				busiest = max(busiest, b.InFlight())
			}
			set(scopeBackend, name, busiest, m)
		}
	}
}

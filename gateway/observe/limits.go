package observe

import (
	"time"

	"github.com/hashicorp/go-metrics/prometheus"
)

// Concurrency-limit and rate-limit metrics. The gauges are sampled every
// second, off the request path:
//
//	impulse_limit_in_flight{scope,upstream}  requests holding a slot
//	impulse_limit_max{scope,upstream}        the limit (0: none)
//	impulse_limit_queue_depth{upstream}      requests waiting in line
//	impulse_limit_overloaded{scope,upstream} counter of 503 overloaded
//	impulse_rate_limited{listener,upstream,scope} counter of 429
//
// A concurrency scope is "global" (upstream ""; always reported),
// "upstream" (for upstreams with max_requests) or "backend" (for
// upstreams with max_requests_per_backend: in_flight is then the busiest
// backend's count). A counter's upstream is the one the refused request
// was routed to, whatever the scope.
var (
	metricLimitInFlight   = []string{"limit", "in_flight"}
	metricLimitMax        = []string{"limit", "max"}
	metricLimitQueue      = []string{"limit", "queue_depth"}
	metricLimitOverloaded = []string{"limit", "overloaded"}
	metricRateLimited     = []string{"rate", "limited"}
)

var (
	limitCounters = []prometheus.CounterDefinition{
		{Name: metricRateLimited, Help: "Requests refused with 429 by a rate limit, by listener, upstream (the routed one) and scope (listener, upstream or route: whose rate_limit refused)."},
		{Name: metricLimitOverloaded, Help: "Requests answered 503 overloaded, by the scope of the concurrency limit they met (global, upstream, backend) and the upstream they were routed to."},
	}
	limitGauges = []prometheus.GaugeDefinition{
		{Name: metricLimitInFlight, Help: "Requests holding a slot of a concurrency limit, by scope (global; upstream; backend: the busiest backend) and upstream, sampled every second."},
		{Name: metricLimitMax, Help: "The concurrency limit of a scope (global, upstream, backend) and upstream (0: none), sampled every second."},
		{Name: metricLimitQueue, Help: "Requests waiting in an upstream's queue for a slot (limits.max_queue), sampled every second."},
	}
)

// overloadKey labels one overloaded counter.
type overloadKey struct{ scope, upstream string }

func (k overloadKey) upstreamName() string { return k.upstream }

func (k overloadKey) emit(gm *Metrics, d uint64) {
	gm.m.IncrCounterWithLabels(metricLimitOverloaded, float32(d), labels("scope", k.scope, "upstream", k.upstream))
}

// Overload counts one request refused over the concurrency limit of scope.
func (gm *Metrics) Overload(scope, upstream string) { add(&gm.overloads, overloadKey{scope, upstream}) }

// Overloads is the overloaded count of scope and upstream.
func (gm *Metrics) Overloads(scope, upstream string) uint64 {
	return load(&gm.overloads, overloadKey{scope, upstream})
}

// rateLimitedKey is one impulse_rate_limited series.
type rateLimitedKey struct{ listener, upstream, scope string }

func (k rateLimitedKey) upstreamName() string { return k.upstream }

func (k rateLimitedKey) emit(gm *Metrics, d uint64) {
	gm.m.IncrCounterWithLabels(metricRateLimited, float32(d), labels("listener", k.listener, "upstream", k.upstream, "scope", k.scope))
}

// RateLimited counts one 429: one atomic add, so that a flood of refused
// requests costs little.
func (gm *Metrics) RateLimited(listener, upstream, scope string) {
	add(&gm.rateLimits, rateLimitedKey{listener, upstream, scope})
}

// SampleLimit sets the gauges of one concurrency scope: the requests
// holding a slot and the limit.
func (gm *Metrics) SampleLimit(now time.Time, scope, upstream string, inFlight int64, limit int) {
	if !gm.samples.due(sampleKey{"limit", scope, upstream}, now, inFlight, int64(limit)) {
		return
	}
	l := labels("scope", scope, "upstream", upstream)
	gm.m.SetGaugeWithLabels(metricLimitInFlight, float32(inFlight), l)
	gm.m.SetGaugeWithLabels(metricLimitMax, float32(limit), l)
}

// SampleQueue sets an upstream's queue-depth gauge.
func (gm *Metrics) SampleQueue(now time.Time, upstream string, waiting int64) {
	if gm.samples.due(sampleKey{"queue", upstream, ""}, now, waiting, 0) {
		gm.m.SetGaugeWithLabels(metricLimitQueue, float32(waiting), labels("upstream", upstream))
	}
}

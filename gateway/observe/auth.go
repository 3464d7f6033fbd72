package observe

import "github.com/hashicorp/go-metrics/prometheus"

// The edge authentication family:
//
//	impulse_auth{route,method,result}  counter of authentication decisions
//
// route is the route's path_prefix (as the span's http.route), method one
// of api_key, basic, jwt, forward and result one of ok, missing, denied,
// malformed, forbidden, unavailable, canceled, busy (auth.Method*, auth.Result*):
// bounded labels. A
// request on a route with several methods counts once per method asked.
var metricAuth = []string{"auth"}

var authCounters = []prometheus.CounterDefinition{
	{Name: metricAuth, Help: "Edge authentication decisions, by route (path_prefix), method (api_key, basic, jwt, forward) and result (ok, missing, denied, malformed, forbidden, unavailable, canceled, busy)."},
}

// authKey is one impulse_auth series; upstream (not a label) ties it to
// the route's upstream, so a removed one's series are forgotten.
type authKey struct{ route, method, result, upstream string }

func (k authKey) upstreamName() string { return k.upstream }

func (k authKey) emit(gm *Metrics, d uint64) {
	gm.m.IncrCounterWithLabels(metricAuth, float32(d), labels("route", k.route, "method", k.method, "result", k.result))
}

// Auth counts one decision of method on a request routed by route (its
// path_prefix) to upstream: one atomic add once the series exists.
func (gm *Metrics) Auth(route, method, result, upstream string) {
	add(&gm.auths, authKey{route, method, result, upstream})
}

// Auths is the count of one series (for tests).
func (gm *Metrics) Auths(route, method, result, upstream string) uint64 {
	return load(&gm.auths, authKey{route, method, result, upstream})
}

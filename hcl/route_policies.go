package hcl

import (
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Per-route policies (README "Per-route policies"): timeouts, retry and
// rate_limit blocks inside upstream.route, replacing the upstream's for
// that route only.

// RouteTimeouts is upstream.route.timeouts: overrides of the upstream's
// timeouts, one by one (0: the upstream's). connect and idle are the
// upstream's connections' and cannot be set on a route; response_header
// can only shorten the upstream's (its connections still bound it).
type RouteTimeouts struct {
	Request, BodyIdle, ResponseHeader time.Duration
}

// buildRoutePolicies converts a route's timeouts, retry and rate_limit;
// it returns the route's response_header when written (nil: not), for
// checkRouteResponseHeader once the upstream's is known.
func buildRoutePolicies(b blk, r *rawRoute, rt *Route) *ladderRung {
	var rh *ladderRung
	if t := one(r.Timeoutss, b.path, "timeouts", b.diags); t != nil {
		tb := b.child("timeouts", t.DefRange)
		for _, a := range []*hcl2.Attribute{t.Connect, t.Idle} {
			if a != nil {
				tb.errorf(a, "", "Connection timeout on a route", "%s is a setting of the upstream's connections, which its routes share; set it in the upstream's timeouts block.", a.Name)
			}
		}
		rt.Timeouts = &RouteTimeouts{
			Request:        tb.duration(t.Request, 0, 0, 0),
			BodyIdle:       tb.duration(t.BodyIdle, 0, positive, 0),
			ResponseHeader: tb.duration(t.ResponseHeader, 0, positive, 0),
		}
		if t.ResponseHeader != nil && rt.Timeouts.ResponseHeader > 0 {
			rh = &ladderRung{tb, t.ResponseHeader, rt.Timeouts.ResponseHeader}
		}
		if t.Request != nil && rt.Timeouts.Request > 0 && rh != nil {
			checkLadder(rt.Timeouts.Request, []ladderRung{*rh})
		}
	}
	if rr := one(r.Retrys, b.path, "retry", b.diags); rr != nil {
		p := buildRetry(b, rr)
		rt.Retry = &p
	}
	if rl := one(r.RateLimits, b.path, "rate_limit", b.diags); rl != nil {
		rt.RateLimit = buildRateLimit(b, rl)
	}
	return rh
}

// checkRouteResponseHeader reports each route's response_header (rungs)
// longer than its upstream's (upstream): a route's can only be shorter.
func checkRouteResponseHeader(upstream time.Duration, rungs []ladderRung) {
	for _, r := range rungs {
		if r.d > upstream {
			r.b.errorf(r.a, "", "Inconsistent timeouts", "a route's response_header (%s) can only shorten its upstream's (%s), which still bounds the upstream's connections.",
				fmtDuration(r.d), fmtDuration(upstream))
		}
	}
}

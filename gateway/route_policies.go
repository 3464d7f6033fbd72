package gateway

import (
	"fmt"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// Per-route policies (README "Per-route policies"): a route's rate_limit,
// retry and timeouts replace its upstream's for the route's requests
// only. They live in the route's routeEdge, so a table without them
// looks nothing up (edgeOf), and the request pipeline picks them where it
// picks the upstream's: admitRate (the limiter), serve (the attempt
// settings and the UpstreamConfig handed to proxy: its request,
// body_idle and response_header timeouts).

// routePolicy is a route's compiled overrides (each nil or zero: the
// upstream's).
type routePolicy struct {
	rate     *ratelimit.Limiter
	attempts *retry.Settings
	timeouts RouteTimeouts
}

func (p routePolicy) none() bool {
	return p.rate == nil && p.attempts == nil && p.timeouts == (RouteTimeouts{})
}

// buildRoutePolicy compiles rc's overrides. old is the route's entry in
// the current table (nil: none): an unchanged rate_limit keeps its
// Limiter and buckets. ups are the upstream's next attempt settings (the
// route's retry policy shares their budget count, nil: a count of its
// own); upRH the upstream's response_header timeout. Errors:
// ratelimit.ErrConfig, retry.Policy.Validate's, a response_header longer
// than the upstream's.
func buildRoutePolicy(old *routeEdge, rc RouteConfig, ups *retry.Settings, upRH time.Duration) (routePolicy, error) {
	p := routePolicy{timeouts: rc.Timeouts}
	t := rc.Timeouts
	if t.Request < 0 || t.BodyIdle < 0 || t.ResponseHeader < 0 {
		return p, fmt.Errorf("route timeouts: negative")
	}
	if t.ResponseHeader > 0 && upRH > 0 && t.ResponseHeader > upRH {
		return p, fmt.Errorf("route timeouts: response_header %s is longer than the upstream's %s, which still bounds its HTTP/1.1 connections", t.ResponseHeader, upRH)
	}
	if rc.RateLimit != nil {
		n, err := rc.RateLimit.Normalize()
		if err != nil {
			return p, err
		}
		if old != nil && old.policy.rate != nil && old.policy.rate.Config() == n {
			p.rate = old.policy.rate
		} else if p.rate, err = ratelimit.New(n); err != nil {
			return p, err
		}
	}
	if rc.Retry != nil {
		var h retry.Hedge
		if ups != nil {
			h = ups.Hedge()
		}
		s, err := retry.NewSettings(*rc.Retry, h, ups)
		if err != nil {
			return p, err
		}
		p.attempts = s
	}
	return p, nil
}

// attempts are the attempt settings of the request's route: its own
// retry policy, else its upstream's.
func (rec *recorder) attempts(tbl *table, up *upstream.Upstream) *retry.Settings {
	if rec.edge != nil && rec.edge.policy.attempts != nil {
		return rec.edge.policy.attempts
	}
	return attemptsOf(tbl, up)
}

// upstreamConfig is the request's upstream's config with its route's
// timeouts in place of the upstream's.
func (rec *recorder) upstreamConfig(tbl *table, up *upstream.Upstream) UpstreamConfig {
	uc := tbl.config(up.Name())
	if rec.edge == nil {
		return uc
	}
	t := rec.edge.policy.timeouts
	if t.Request > 0 {
		uc.RequestTimeout = t.Request
	}
	if t.BodyIdle > 0 {
		uc.BodyIdleTimeout = t.BodyIdle
	}
	if t.ResponseHeader > 0 {
		uc.ResponseHeaderTimeout = t.ResponseHeader
	}
	return uc
}

// routeRate is the limiter of the request's route: its own, else its
// upstream's (nil: none).
func (rec *recorder) routeRate(tbl *table, up *upstream.Upstream) *ratelimit.Limiter {
	if rec.edge != nil && rec.edge.policy.rate != nil {
		return rec.edge.policy.rate
	}
	return tbl.rates[up.Name()]
}

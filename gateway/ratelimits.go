package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// Scopes of a rate limit, the scope label of impulse_rate_limited.
const (
	rateScopeListener = "listener"
	rateScopeUpstream = "upstream"
)

// rateLimiters are the Limiters of the listeners or of the upstreams, by
// name. Never modified once published.
type rateLimiters map[string]*ratelimit.Limiter

// buildRateLimiters makes the Limiter of each name with a rate limit,
// keeping old's Limiter (and its buckets) where the block normalizes to the
// same configuration; a changed block gets a new, empty table. Errors name
// the listener or upstream (what) and wrap ratelimit.ErrConfig.
func buildRateLimiters(old rateLimiters, what string, names []string, cfgs []*ratelimit.Config) (rateLimiters, error) {
	out := rateLimiters{}
	for i, c := range cfgs {
		if c == nil {
			continue
		}
		n, err := c.Normalize()
		if err != nil {
			return nil, fmt.Errorf("gateway: %s %q: %w", what, names[i], err)
		}
		if l := old[names[i]]; l != nil && l.Config() == n {
			out[names[i]] = l
			continue
		}
		l, err := ratelimit.New(n)
		if err != nil {
			return nil, fmt.Errorf("gateway: %s %q: %w", what, names[i], err)
		}
		out[names[i]] = l
	}
	return out, nil
}

// upstreamRateLimiters builds the upstreams' Limiters for the next table.
func upstreamRateLimiters(old rateLimiters, ups []UpstreamConfig) (rateLimiters, error) {
	names, cfgs := make([]string, len(ups)), make([]*ratelimit.Config, len(ups))
	for i, u := range ups {
		names[i], cfgs[i] = u.Name, u.RateLimit
	}
	return buildRateLimiters(old, "upstream", names, cfgs)
}

// listenerRateLimiters builds the listeners' Limiters for an Apply.
func (g *Gateway) listenerRateLimiters(lcs []ListenerConfig) (rateLimiters, error) {
	names, cfgs := make([]string, len(lcs)), make([]*ratelimit.Config, len(lcs))
	for i, lc := range lcs {
		names[i], cfgs[i] = lc.Name, lc.RateLimit
	}
	var old rateLimiters
	if p := g.listenerRates.Load(); p != nil {
		old = *p
	}
	return buildRateLimiters(old, "listener", names, cfgs)
}

// admitRate is the rate-limit step of the admission order (validate → route
// → rate limit → concurrency limits → pick): the listener's limit, then the
// upstream's, each keyed by its own key form. A request over one is
// answered 429 rate_limited with Retry-After (whole seconds, at least 1,
// RFC 9110 §10.2.3) and reports false; it never reaches a backend and
// never counts against a later limit (the upstream's, after a listener's
// refusal; the concurrency limits). A request the listener's limit admitted
// has spent that token even if the upstream's then refuses it: the
// listener's limit counts what a client sends to the listener.
func (g *Gateway) admitRate(rec *recorder, w http.ResponseWriter, r *http.Request, tbl *table, rt *route.Route[*upstream.Upstream]) bool {
	var ll *ratelimit.Limiter
	if p := g.listenerRates.Load(); p != nil {
		ll = (*p)[rec.listener]
	}
	ul := tbl.rates[rt.Target.Name()]
	if ll == nil && ul == nil {
		return true
	}
	now := time.Now()
	scope, wait := rateScopeListener, time.Duration(0)
	ok := true
	if ll != nil {
		ok, wait = ll.Allow(ll.Key(r, rt.ID), now)
	}
	if ok && ul != nil {
		scope = rateScopeUpstream
		ok, wait = ul.Allow(ul.Key(r, rt.ID), now)
	}
	if ok {
		return true
	}
	g.obs.Metrics.RateLimited(rec.listener, rt.Target.Name(), scope)
	w.Header()["Retry-After"] = []string{retryAfterSeconds(wait)}
	rec.finish(w, rt.Target, nil, answer.RateLimited)
	return false
}

// retryAfterSeconds is a Retry-After delay-seconds value (RFC 9110
// §10.2.3) for d: whole seconds rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := max((d+time.Second-1)/time.Second, 1)
	return strconv.FormatInt(int64(s), 10)
}

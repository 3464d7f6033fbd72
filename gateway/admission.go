package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/concurrency"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/gateway/reqbody"
	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// Concurrency limits: the admission step after validation, routing and
// the rate limits, before a backend is picked (architecture.md "Request
// pipeline"). Every request and every tunnel goes through admit, then
// pick: the global limit first (Config.MaxRequests, never queued), then
// its upstream's (UpstreamConfig.MaxRequests, with its queue), then the
// per-backend limit inside the pick (UpstreamConfig.MaxRequestsPerBackend,
// a full backend skipped). A request turned away by one limit holds no
// slot of any other; an admitted one holds its slots until its response
// is done (the body copied, the tunnel closed).

// retryAfterOverloaded is the Retry-After of an overloaded answer: one
// second (RFC 9110 §10.2.3, delay-seconds). An overload clears as soon as
// requests finish, so a client should come back soon, not at once; a
// longer hint would idle capacity that frees within milliseconds.
var retryAfterOverloaded = []string{"1"}

// Scopes of the concurrency limits: the scope label of the limit metrics.
const (
	scopeGlobal   = "global"   // Config.MaxRequests
	scopeUpstream = "upstream" // UpstreamConfig.MaxRequests (and its queue)
	scopeBackend  = "backend"  // UpstreamConfig.MaxRequestsPerBackend
)

// pickTries bounds how often pick looks for another backend when the one
// picked filled up before the request could be counted on it.
const pickTries = 3

// slots are the concurrency-limit slots an admitted request holds (a nil
// Limiter: none); release frees them once the response is done.
type slots struct{ global, upstream *concurrency.Limiter }

func (s slots) release() {
	s.upstream.Release()
	s.global.Release()
}

// admit takes the global and the upstream slot of a request routed to up,
// in that order. The upstream's may wait in its queue (max_queue, up to
// queue_timeout; a gRPC call's grpc-timeout bounds the wait too). When it
// cannot, admit answers — 503 overloaded with Retry-After over a limit,
// 499 (a reset) when the client left the queue, 504 grpc_timeout when a
// gRPC call's deadline passed in it — and returns false, holding nothing.
func (g *Gateway) admit(rec *recorder, w http.ResponseWriter, up *upstream.Upstream) (slots, bool) {
	if !g.global.TryAcquire() {
		g.overloaded(rec, w, up, scopeGlobal)
		return slots{}, false
	}
	ul := g.table.Load().limiters[up.Name()]
	if ul.TryAcquire() {
		return slots{g.global, ul}, true
	}
	ctx, stop := rec.grpc.withDeadline(rec.r.Context())
	err := ul.Acquire(ctx)
	stop()
	if err == nil {
		return slots{g.global, ul}, true
	}
	g.global.Release()
	switch {
	case errors.Is(err, concurrency.ErrFull) || errors.Is(err, concurrency.ErrQueueTimeout):
		g.overloaded(rec, w, up, scopeUpstream)
	case rec.grpc.expired():
		rec.finish(w, up, nil, answer.GRPCTimeout)
	default:
		rec.finish(w, up, nil, answer.ClientCanceled)
	}
	return slots{}, false
}

// pick chooses r's backend in up and counts the request on it
// (Backend.TryAcquire): a backend at max_requests_per_backend is skipped,
// never waited for. When none can take it, pick answers 503 — overloaded
// (with Retry-After) when healthy backends exist but all are full,
// discovery_pending, or no_healthy_backend — and returns nil. A non-nil
// backend is paired with Done.
func (g *Gateway) pick(rec *recorder, w http.ResponseWriter, r *http.Request, up *upstream.Upstream) *upstream.Backend {
	b, set := up.Pick(r)
	raced, switched := false, false
	for try := 1; b != nil; try++ {
		ok, over := b.Claim()
		if ok && over != upstream.Within && !switched {
			// The backend holds enough unanswered requests (perhaps a black
			// hole): another takes this one if any can, once (two stalled
			// backends must not pass the request back and forth). At a
			// cold upstream nothing tells yet which one is silent: when
			// the other is at the limit too, the request waits for the
			// first answer, then is picked again.
			switched = true
			if alt := anotherThan(up, r, b); alt != nil {
				b.Unclaim()
				if over == upstream.Cold && alt.AtLimit() {
					g.holdCold(r.Context(), up)
					b, set = up.Pick(r)
				} else {
					b = alt
				}
				continue
			}
		}
		if ok {
			return b
		}
		raced = true // filled by a concurrent request since Pick saw room
		if try == pickTries {
			break
		}
		b, set = up.Pick(r)
	}
	switch {
	case raced || set.Saturated():
		g.overloaded(rec, w, up, scopeBackend)
	case set.Pending:
		rec.finish(w, up, nil, answer.Pending)
	default:
		rec.finish(w, up, nil, answer.NoBackend)
	}
	return nil
}

// coldHold bounds the wait of a request for its upstream's first answer
// (upstream.Cold): a burst at a cold gateway puts at most the stall limit
// on each backend before any answer tells a black hole from the others.
// Backends that have not answered in a second are treated as answering.
const coldHold = time.Second

// holdCold waits for up's first answer, g.coldHold or ctx, whichever
// ends first.
func (g *Gateway) holdCold(ctx context.Context, up *upstream.Upstream) {
	t := time.NewTimer(g.coldHold)
	defer t.Stop()
	select {
	case <-up.FirstAnswer():
	case <-t.C:
	case <-ctx.Done():
	}
}

// anotherThan is a backend of up other than b for r, or nil.
func anotherThan(up *upstream.Upstream, r *http.Request, b *upstream.Backend) *upstream.Backend {
	if alt, _ := up.PickExcept(r, []*upstream.Backend{b}); alt != b {
		return alt
	}
	return nil
}

// overloaded answers 503 overloaded with Retry-After, counted against the
// limit of scope.
func (g *Gateway) overloaded(rec *recorder, w http.ResponseWriter, up *upstream.Upstream, scope string) {
	g.obs.Metrics.Overload(scope, up.Name())
	w.Header()["Retry-After"] = retryAfterOverloaded
	rec.finish(w, up, nil, answer.Overloaded)
}

// Scopes of a rate limit, the scope label of impulse_rate_limited.
const (
	rateScopeListener = "listener"
	rateScopeUpstream = "upstream"
	rateScopeRoute    = "route" // a route's own rate_limit (route_policies.go)
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
func (g *Gateway) admitRate(rec *recorder, w http.ResponseWriter, r *http.Request, tbl *table, rt *route.Route[*upstream.Upstream], up *upstream.Upstream) bool {
	var ll *ratelimit.Limiter
	if p := g.listenerRates.Load(); p != nil {
		ll = (*p)[rec.listener]
	}
	ul := rec.routeRate(tbl, up) // the route's own, else the upstream's (route_policies.go)
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
		if rec.edge != nil && rec.edge.policy.rate == ul {
			scope = rateScopeRoute
		}
		ok, wait = ul.Allow(ul.Key(r, rt.ID), now)
	}
	if ok {
		return true
	}
	g.obs.Metrics.RateLimited(rec.listener, up.Name(), scope)
	w.Header()["Retry-After"] = []string{retryAfterSeconds(wait)}
	rec.finish(w, up, nil, answer.RateLimited)
	return false
}

// retryAfterSeconds is a Retry-After delay-seconds value (RFC 9110
// §10.2.3) for d: whole seconds rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := max((d+time.Second-1)/time.Second, 1)
	return strconv.FormatInt(int64(s), 10)
}

// defaultLimits apply to the listener-less Handler.
var defaultLimits = Limits{}.Resolved()

// setListenerLimits publishes the limits of lcs for the pipeline, by
// listener name.
func (g *Gateway) setListenerLimits(lcs []ListenerConfig) {
	m := make(map[string]*Limits, len(lcs))
	for _, lc := range lcs {
		l := lc.Limits.Resolved()
		m[lc.Name] = &l
	}
	g.limits.Store(&m)
}

// limitsFor is the resolved Limits of the named listener.
func (g *Gateway) limitsFor(listener string) *Limits {
	if m := g.limits.Load(); m != nil {
		if l := (*m)[listener]; l != nil {
			return l
		}
	}
	return &defaultLimits
}

// bodyLimit is the body cap for a request routed to up: the upstream's
// own, else the listener's (0: none).
func bodyLimit(lim *Limits, tbl *table, up *upstream.Upstream) int64 {
	if n := tbl.config(up.Name()).MaxRequestBodyBytes; n > 0 {
		return n
	}
	return lim.MaxRequestBodyBytes
}

// bodyLimitAnswer is the answer to a body failure that limits caused;
// false for other failures.
func bodyLimitAnswer(failure reqbody.Failure) (answer.Answer, bool) {
	switch failure {
	case reqbody.TooLarge:
		return answer.BodyTooLarge, true
	case reqbody.Timeout:
		return answer.ClientBodyTimeout, true
	}
	return answer.Answer{}, false
}

// closeConnAfter asks Go's HTTP/1.1 server to close the connection after this
// response: the rest of the request body was not read, so where the next
// request starts is not known. HTTP/2 and HTTP/3 reset the stream instead.
func closeConnAfter(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 {
		w.Header()["Connection"] = []string{"close"}
	}
}

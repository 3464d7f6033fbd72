package gateway

import (
	"errors"
	"net/http"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/concurrency"
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
	raced := false
	for try := 1; b != nil; try++ {
		if b.TryAcquire() {
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

// overloaded answers 503 overloaded with Retry-After, counted against the
// limit of scope.
func (g *Gateway) overloaded(rec *recorder, w http.ResponseWriter, up *upstream.Upstream, scope string) {
	g.obs.Metrics.Overload(scope, up.Name())
	w.Header()["Retry-After"] = retryAfterOverloaded
	rec.finish(w, up, nil, answer.Overloaded)
}

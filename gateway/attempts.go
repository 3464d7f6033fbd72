package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/reqbody"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// The attempt step of the pipeline (architecture.md): pick a backend, send
// the request, and, when the try fails in a way the upstream's retry policy
// covers, send it again to another backend after a back-off, within the
// retry budget; or, for a hedged request, send copies after hedge.delay and
// keep the first answer (hedge.go). The decisions are gateway/retry's; this
// file gathers their inputs and acts on them.
//
// Retries happen at two levels, one policy. The transports resend what a
// backend provably never processed, on a new connection to the same
// backend: x/net/http2 the streams above a graceful GOAWAY's
// last-stream-id and REFUSED_STREAMs (it does so for every request without
// a body, with no way to turn it off, and for those with one when it can
// get the body again: the replayBody below, bounded by max_body_bytes),
// and net/http a request it could not write at all (a kept-alive
// connection the backend had closed), or an idempotent one on such a
// connection that failed before any response byte. What they cannot resend reaches the attempt loop,
// which tries another backend: connect failures (refused, timed out, TLS),
// refused streams the transport gave up on, and the opt-in conditions (a
// reset or a try's timeout before the response, a 502, 503 or 504) for
// idempotent methods. Transport-level resends are not counted as retries
// and take nothing from the budget: they go to the same backend, which
// said it did not process the request.

// attemptsOf is up's attempt settings in tbl (retry.DefaultSettings for
// an upstream that left it: a request routed by an older table).
func attemptsOf(tbl *table, up *upstream.Upstream) *retry.Settings {
	if s := tbl.attempts[up]; s != nil {
		return s
	}
	return defaultAttempts
}

var defaultAttempts = retry.DefaultSettings()

// errPerTryTimeout is the cancellation cause of a try past per_try_timeout:
// a response-header timeout (504 response_header_timeout once no try is
// left) of one try, retried as a reset.
var errPerTryTimeout = fmt.Errorf("%w (per_try_timeout)", transport.ErrResponseHeaderTimeout)

// tryWait is how long a try of a request to b waits for response headers,
// whether the gateway times that itself (roundTrip's own) and the timer's
// cause: the upstream's response_header timeout, or per_try_timeout when
// it is shorter.
//
// rh is the request's response_header timeout (its route's when it has
// one, route_policies.go): when it is not the upstream's, whose value the
// HTTP/1.1 transport holds, the gateway times it itself.
func tryWait(up *upstream.Upstream, rh time.Duration, p *retry.Policy, b *upstream.Backend) (wait time.Duration, own bool, cause error) {
	wait, own, cause = up.Config().ResponseHeaderTimeout, transport.IsHTTP2(b.Scheme), transport.ErrResponseHeaderTimeout
	if rh > 0 && rh != wait {
		wait, own = rh, true
	}
	if pt := p.PerTryTimeout; pt > 0 && (wait <= 0 || pt < wait) {
		wait, own, cause = pt, true, errPerTryTimeout
	}
	return wait, own, cause
}

// bodyKeep is the replay budget of r's body when its first try goes to b:
// max_body_bytes when another try may have to send it again (a retry, or
// a transport-level resend: x/net/http2 after REFUSED_STREAM or GOAWAY,
// net/http for a request it could not write at all), -1 when none can.
func bodyKeep(p *retry.Policy, b *upstream.Backend) int64 {
	if transport.IsHTTP2(b.Scheme) || p.Attempts > 1 && p.On != 0 {
		return p.MaxBodyBytes
	}
	return -1
}

// try is one round trip of a request to one backend.
type try struct {
	b      *upstream.Backend
	start  time.Time
	resp   *http.Response
	ctx    context.Context
	cancel context.CancelCauseFunc
	err    error
	// outcome and reason are what the try tells passive health, once it
	// is over; status is the answer a failed try would get (err != nil).
	outcome health.Outcome
	reason  string
	status  int
	// judged holds the failure of a round trip that returned an error, as
	// it was then (judge): a client that leaves during the retry's
	// back-off must not turn the backend's failure into its own.
	judged *judgment
	// final: the try whose outcome the client gets; hedge: a hedged copy.
	final, hedge bool
	slot         retry.Slot        // the budget slot it holds (0: none)
	trace        *observe.TryTrace // the try's client span; nil: not traced
}

// result is what the retry state needs of t, once its round trip
// returned (retry.Result): the backend's status, or the retry condition
// of its failure (0 when it matches none: an invalid response, the
// client's doing, a failure the backend is not known to have failed by).
func (t *try) result(rec *recorder, r *http.Request, body *reqbody.Client, iw *interim, kept bool) retry.Result {
	res := retry.Result{Method: r.Method, Started: iw.relayed(), BodyKept: kept}
	if t.err == nil {
		res.Status = t.resp.StatusCode
		res.Ejected = res.Status >= 500 && t.b.Health.Strike()
		return res
	}
	res.Expired = r.Context().Err() != nil || rec.grpc.expired()
	if body.Failed() != reqbody.OK || iw.invalidResponse(t.err) {
		return res
	}
	switch {
	case errors.Is(context.Cause(t.ctx), transport.ErrResponseHeaderTimeout):
		res.Failure = retry.Reset // the try's own timer; never a client's cancel
	case t.ctx.Err() != nil || transport.IsUnsendable(t.err):
		// the client's doing: no other backend would take it
	case transport.IsConnectFailure(t.err):
		res.Failure = retry.ConnectFailure
	case transport.IsRefusedStream(t.err) || errors.Is(t.err, reqbody.ErrNotReplayable):
		res.Failure = retry.RefusedStream
	default:
		res.Failure = retry.Reset
	}
	// Before the try's Done: the black hole still counts this request.
	res.Behind = res.Failure == retry.Reset && t.b.Stalled()
	return res
}

// failure is the answer and health outcome of a failed round trip
// (t.err != nil): a stream the backend left unprocessed (graceful GOAWAY;
// a body too long to send again) and the client's own doing are not the
// backend's failure.
func (t *try) failure(rec *recorder, iw *interim) (a answer.Answer, o health.Outcome) {
	a = answer.ForFailure(transport.Classify(t.ctx, t.err))
	if iw.invalidResponse(t.err) {
		a = answer.InvalidResponse
	}
	if rec.grpc.expired() { // the client's deadline, not the backend's failure
		a = answer.GRPCTimeout
	}
	o = health.Neutral
	if a.Backend && !transport.IsGracefulGoAway(t.err) && !errors.Is(t.err, reqbody.ErrNotReplayable) {
		o = health.Failure
	}
	return a, o
}

// judgment is a failed round trip's answer and health outcome.
type judgment struct {
	a answer.Answer
	o health.Outcome
}

// judge records t's failure as its round trip returned it (t.err set);
// failure gives it from then on, when the request's context has changed.
func (t *try) judge(rec *recorder, iw *interim) {
	if t.err != nil && t.judged == nil {
		a, o := t.failure(rec, iw)
		t.judged = &judgment{a, o}
	}
}

// verdict is t's failure for passive health: as judged when its round
// trip returned, else as it is now.
func (t *try) verdict(rec *recorder, iw *interim) (answer.Answer, health.Outcome) {
	if j := t.judged; j != nil {
		return j.a, j.o
	}
	return t.failure(rec, iw)
}

// discard ends a failed try that is not relayed: its failure goes to
// passive health (and the backend's response counts: a backend failing
// every try that a retry hides must not look clean) and a 5xx answer is
// dropped.
func (t *try) discard(rec *recorder, iw *interim) {
	if t.err == nil {
		t.resp.Body.Close()
		t.outcome, t.reason = health.Failure, "status "+strconv.Itoa(t.resp.StatusCode)
	} else {
		var a answer.Answer
		a, t.outcome = t.verdict(rec, iw)
		t.status, t.reason = a.Status, a.Reason
	}
	t.cancel(nil)
	t.trace.EndAtAnswer() // not at the end of a retry's back-off
	rec.endTry(t)
}

// proxy runs the tries of r to up: the first to the picked backend, then,
// as long as the retry policy, the budget and the body allow, one to
// another backend after each failure it covers; the last try's outcome is
// relayed. Answers: 503 when no backend is eligible, and relay's.
//
// b is the backend picked for the first try, already acquired (admission.go's
// pick, within max_requests_per_backend); a retry or hedge takes its
// backend's slot the same way, and is not sent when that backend is full.
// uc's request timeout bounds every try, back-off and hedge; its body_idle
// each read of the relayed response body (timeouts.go).
func (g *Gateway) proxy(rec *recorder, w http.ResponseWriter, r *http.Request, up *upstream.Upstream, ap *retry.Settings, load retry.Load, b *upstream.Backend, uc UpstreamConfig) {
	if ap.Hedge().Applies(r.Method, reqbody.HasBody(r)) {
		g.hedged(rec, w, r, up, ap, load, b, uc) // hedge.go
		return
	}
	traced, iw := withInterim(w, r)
	traced = g.withClientCert(traced, rec.listener, r)
	traced, stopDeadline := rec.grpc.withDeadline(traced) // grpc.go
	defer stopDeadline()
	// The request timeout is set once for the whole exchange: every try,
	// back-off and the copy of the response body share it.
	traced, stopRequest := requestDeadline(traced, uc.RequestTimeout)
	defer stopRequest()
	p := ap.Policy()
	st := ap.Start(load)
	defer st.Close()
	cb := reqbody.NewClient(r, bodyKeep(p, b))
	var tried [retry.MaxAttempts]*upstream.Backend
	t := try{b: b, start: rec.out.Start}
	for n := 1; ; n++ {
		tried[n-1] = t.b
		wait, own, cause := tryWait(up, uc.ResponseHeaderTimeout, p, t.b)
		t.trace = rec.out.Span.StartTry(r, t.b, n, false)
		t.resp, t.ctx, t.cancel, t.err = roundTrip(traced, r, t.b, &cb, wait, own, cause, t.trace)
		iw.finish() // no 1xx after this: w is the handler's again
		if t.err == nil && t.resp.StatusCode < 200 {
			// Only a 101 arrives as a final response (net/http), and the
			// gateway never forwards Upgrade.
			t.resp.Body.Close()
			t.resp, t.err = nil, errSwitchingProtocols
		}
		var next *upstream.Backend
		res := t.result(rec, r, &cb, iw, cb.Kept())
		t.judge(rec, iw) // before a back-off the client may leave in
		d := st.Retry(res,
			func() (bool, bool) {
				next, _ = up.PickExcept(r, tried[:n])
				return next != nil, next != nil && next.Health.Failing()
			},
			func() bool { return next.TryAcquire() })
		if d.Verdict == retry.NoBudget {
			g.obs.Metrics.RetryBudgetExhausted(up.Name())
		}
		if d.Verdict != retry.Again {
			break
		}
		if !sleep(traced, d.Wait) || !cb.Again() {
			next.Unclaim() // acquired, never sent
			st.Release(d.Slot)
			t.trace.EndAtAnswer() // the try ended at its answer, not in the back-off
			break
		}
		t.discard(rec, iw)
		st.Release(t.slot)
		iw.reopen()
		g.obs.Metrics.Retry(up.Name(), d.Condition.Label())
		g.log.Debug("retrying on another backend", "upstream", up.Name(), "backend", t.b.ID, "next", next.ID, "reason", d.Condition.Label(), "error", t.err)
		t = try{b: next, start: time.Now(), slot: d.Slot}
	}
	// No try follows: a body the transport gave up is closed now, which
	// ends a read it is blocked in (a client waiting for 100 Continue).
	cb.End()
	t.final = true
	defer rec.endTry(&t) // before st.Close gives the slot back
	g.relay(rec, w, r, up, &t, &cb, iw, uc)
}

// roundTrip sends one try of r to b, in ctx (r's context with the interim
// trace), its body taken from cb (nil: none). wait bounds the wait for
// response headers (0: none); own says the gateway times it itself: always
// for HTTP/2 backends, for HTTP/1.1 ones when the try's wait is shorter
// than net/http's own Transport.ResponseHeaderTimeout (a per_try_timeout).
// cause is the timer's cancellation cause (ErrResponseHeaderTimeout, or
// errPerTryTimeout which wraps it). The returned context carries the cause
// when that timer fired; the caller must call cancel once the response body
// is done. tt is the try's trace (nil: not traced).
func roundTrip(ctx context.Context, r *http.Request, b *upstream.Backend, cb *reqbody.Client, wait time.Duration, own bool, cause error, tt *observe.TryTrace) (*http.Response, context.Context, context.CancelCauseFunc, error) {
	body := cb.TryBody()
	if !own || wait <= 0 {
		out, _ := wire.Outgoing(ctx, r, b, body, false, tt)
		resp, err := b.Transport.RoundTrip(out)
		tt.RoundTripped()
		if err == nil {
			b.Answered()
		}
		return resp, ctx, noCancel, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	out, tb := wire.Outgoing(ctx, r, b, body, true, tt)
	// As net/http's ResponseHeaderTimeout, the wait starts once the request
	// is fully sent: a client still sending its body is not the backend's
	// delay.
	var mu sync.Mutex
	var timer *time.Timer
	done := false
	startTimer := func() {
		mu.Lock()
		if !done && timer == nil {
			timer = time.AfterFunc(wait, func() { cancel(cause) })
		}
		mu.Unlock()
	}
	if tb == nil {
		startTimer()
	} else {
		tb.OnEOF = startTimer
	}
	resp, err := b.Transport.RoundTrip(out)
	tt.RoundTripped()
	if err == nil {
		b.Answered()
	}
	mu.Lock()
	done = true
	fired := timer != nil && !timer.Stop()
	mu.Unlock()
	if fired && err == nil {
		// The timer fired just as headers arrived; the body is already canceled.
		resp.Body.Close()
		resp, err = nil, cause
	}
	return resp, ctx, cancel, err
}

func noCancel(error) {}

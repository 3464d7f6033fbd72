package gateway

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// errHedgeLost cancels the tries of a hedged request that another try's
// answer beat: their outcome is Neutral, not a failure of their backend.
var errHedgeLost = errors.New("gateway: another try of the request answered first")

// hedgeTry is one try of a hedged request, run on its own goroutine.
type hedgeTry struct {
	try
	hedge   bool                    // a hedged copy, not the first try or a retry
	counted bool                    // holds a slot of the retry budget
	stop    context.CancelCauseFunc // cancels the try's own context
}

// hedging is the state of one hedged request (retry.Hedge.Applies).
type hedging struct {
	g       *Gateway
	rec     *recorder
	r       *http.Request
	up      *upstream.Upstream
	ap      *attemptPolicy
	base    context.Context
	results chan *hedgeTry
	tried   []*upstream.Backend
	running []*hedgeTry // launched and not yet received from results
}

// launch starts a try to b on its own goroutine; its result arrives on
// h.results.
//
// b is acquired (its slot taken within max_requests_per_backend).
func (h *hedging) launch(b *upstream.Backend, hedge, counted bool) {
	t := &hedgeTry{try: try{b: b, start: time.Now()}, hedge: hedge, counted: counted}
	ctx, stop := context.WithCancelCause(h.base)
	t.stop = stop
	h.tried = append(h.tried, b)
	h.running = append(h.running, t)
	h.rec.attempts++
	wait, own, cause := tryWait(h.up, &h.ap.retry, b)
	t.trace = h.rec.startTry(b, h.rec.attempts, hedge)
	go func() {
		t.resp, t.ctx, t.cancel, t.err = roundTrip(ctx, h.r, b, nil, wait, own, cause, t.trace)
		if t.err == nil && t.resp.StatusCode < 200 {
			t.resp.Body.Close()
			t.resp, t.err = nil, errSwitchingProtocols
		}
		h.results <- t
	}()
}

// received takes t off the running tries.
func (h *hedging) received(t *hedgeTry) {
	h.running = slices.DeleteFunc(h.running, func(x *hedgeTry) bool { return x == t })
}

// end ends a try that is not relayed: a failure (discard) or, when lost, a
// Neutral outcome whatever it got.
func (h *hedging) end(t *hedgeTry, lost bool) {
	if lost {
		if t.resp != nil {
			t.resp.Body.Close()
		}
		t.cancel(nil)
		t.outcome, t.reason = health.Neutral, ""
		t.done()
	} else {
		t.discard(h.rec, nil)
	}
	t.stop(nil)
	if t.counted {
		h.ap.retries.Add(-1)
	}
}

// hedged runs a request hedging applies to (a GET, HEAD or OPTIONS without
// a body): the first try goes to b; every hedge.delay without an answer
// another copy goes to another backend, up to hedge.max and within the
// retry budget; a try that fails as the retry policy covers is retried
// after a back-off, as proxy does. The first answer wins and the other
// tries are canceled, their outcome Neutral; when every try failed, the
// last failure is answered. 1xx responses are not relayed: several tries
// could send them.
func (g *Gateway) hedged(rec recorder, w http.ResponseWriter, r *http.Request, up *upstream.Upstream, ap *attemptPolicy, b *upstream.Backend, uc UpstreamConfig) {
	base := g.withClientCert(r.Context(), rec.listener, r)
	base, stopDeadline := rec.grpc.withDeadline(base)
	defer stopDeadline()
	base, stopRequest := requestDeadline(base, uc.RequestTimeout) // every copy and retry
	defer stopRequest()
	h := &hedging{g: g, rec: &rec, r: r, up: up, ap: ap, base: base,
		results: make(chan *hedgeTry, retry.MaxAttempts+retry.MaxHedges)}
	p, hp := &ap.retry, ap.hedge
	h.launch(b, false, false)
	hedgeTimer := time.NewTimer(hp.Delay)
	defer hedgeTimer.Stop()
	var backoff *time.Timer
	var backoffC <-chan time.Time
	var retryTo *upstream.Backend
	retryCond := retry.Condition(0)
	tries, hedges := 1, 0
	var final *hedgeTry
	doneC := base.Done()
	for final == nil {
		select {
		case t := <-h.results:
			h.received(t)
			cond := t.condition(&rec, r, nil, nil)
			retryable := backoffC == nil && cond != 0 &&
				p.Retry(retry.Failure{Condition: cond, Method: r.Method, Tries: tries, BodyKept: true})
			var next *upstream.Backend
			if retryable {
				next, _ = up.PickExcept(r, h.tried)
				retryable = next != nil
			}
			if retryable && !ap.takeRetry(up) {
				g.metrics.retryBudgetExhausted(up.Name())
				retryable = false
			}
			if retryable && !next.TryAcquire() { // full (max_requests_per_backend)
				ap.retries.Add(-1)
				retryable = false
			}
			switch {
			case retryable:
				h.end(t, false)
				tries++
				retryTo, retryCond = next, cond
				backoff = time.NewTimer(p.Wait(tries-1, rand.Uint64()))
				backoffC = backoff.C
			case len(h.running) == 0 && backoffC == nil,
				t.err == nil && p.On&cond == 0: // a 5xx in `on` is a failure: a running try may still answer
				final = t // the first answer, or the last failure
			default:
				h.end(t, false) // failed; other tries go on
			}
		case <-backoffC:
			backoffC = nil
			g.metrics.retry(up.Name(), retryCond.Label())
			h.launch(retryTo, false, true)
		case <-hedgeTimer.C:
			next, _ := up.PickExcept(r, h.tried)
			if !hp.Next(hedges) || next == nil || slices.Contains(h.tried, next) {
				break // no other backend to send a copy to
			}
			if !ap.takeRetry(up) {
				g.metrics.retryBudgetExhausted(up.Name())
				break // spent: no more copies of this request
			}
			if !next.TryAcquire() { // full (max_requests_per_backend)
				ap.retries.Add(-1)
				break
			}
			hedges++
			g.metrics.hedge(up.Name(), false)
			h.launch(next, true, true)
			if hp.Next(hedges) {
				hedgeTimer.Reset(hp.Delay)
			}
		case <-doneC:
			if len(h.running) > 0 {
				doneC = nil // their results follow, failed by the same context
				break
			}
			// Waiting out a back-off: nothing to relay.
			backoff.Stop()
			retryTo.Done(health.Neutral, "", 0)
			ap.retries.Add(-1)
			rec.finish(w, up, nil, transport.StatusClientClosed, transport.ReasonClientCanceled)
			return
		}
	}
	if backoffC != nil { // an answer came during a retry's back-off
		backoff.Stop()
		retryTo.Done(health.Neutral, "", 0)
		ap.retries.Add(-1)
	}
	h.cancelOthers()
	if final.hedge && final.err == nil {
		g.metrics.hedge(up.Name(), true)
	}
	defer func() {
		final.done()
		final.stop(nil)
		if final.counted {
			ap.retries.Add(-1)
		}
	}()
	g.relay(&rec, w, r, up, &final.try, nil, nil, uc)
}

// cancelOthers cancels the running tries (another answered first) and
// ends each, Neutral, when its result arrives.
func (h *hedging) cancelOthers() {
	if len(h.running) == 0 {
		return
	}
	for _, t := range h.running {
		t.stop(errHedgeLost)
	}
	n := len(h.running)
	go func() {
		for range n {
			h.end(<-h.results, true)
		}
	}()
}

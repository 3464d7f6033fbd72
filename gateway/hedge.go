package gateway

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// errHedgeLost cancels the tries of a hedged request that another try's
// answer beat: their outcome is Neutral, not a failure of their backend.
var errHedgeLost = errors.New("gateway: another try of the request answered first")

// hedgeTry is one try of a hedged request, run on its own goroutine.
type hedgeTry struct {
	try
	stop context.CancelCauseFunc // cancels the try's own context
}

// hedging is the state of one hedged request (retry.Hedge.Applies). Only
// the handler's goroutine touches it; each try's round trip runs on a
// goroutine of its own and hands its result over results. The request's
// recorder is passed to its methods, never kept: kept, it would leave the
// handler's stack for every request (escape analysis).
type hedging struct {
	g       *Gateway
	r       *http.Request
	up      *upstream.Upstream
	rh      time.Duration // the response_header timeout (tryWait)
	st      *retry.State
	base    context.Context
	results chan *hedgeTry
	tried   []*upstream.Backend
	running []*hedgeTry // launched and not yet received from results
}

// launch starts a try to b on its own goroutine, holding the budget slot
// slot (0: none); its result arrives on h.results.
//
// b is acquired (its slot taken within max_requests_per_backend).
func (h *hedging) launch(rec *recorder, b *upstream.Backend, hedge bool, slot retry.Slot) {
	t := &hedgeTry{try: try{b: b, start: time.Now(), hedge: hedge, slot: slot}}
	ctx, stop := context.WithCancelCause(h.base)
	t.stop = stop
	h.tried = append(h.tried, b)
	h.running = append(h.running, t)
	wait, own, cause := tryWait(h.up, h.rh, h.st.Policy(), b)
	t.trace = rec.out.Span.StartTry(h.r, b, len(h.tried), hedge)
	r, results := h.r, h.results // not h: the request's recorder stays on its stack
	go func() {
		t.resp, t.ctx, t.cancel, t.err = roundTrip(ctx, r, b, nil, wait, own, cause, t.trace)
		if t.err == nil && t.resp.StatusCode < 200 {
			t.resp.Body.Close()
			t.resp, t.err = nil, errSwitchingProtocols
		}
		results <- t
	}()
}

// received takes t off the running tries.
func (h *hedging) received(t *hedgeTry) {
	h.running = slices.DeleteFunc(h.running, func(x *hedgeTry) bool { return x == t })
}

// end ends a try that is not relayed: a failure (discard) or, when lost, a
// Neutral outcome whatever it got.
func (h *hedging) end(rec *recorder, t *hedgeTry, lost bool) {
	if lost {
		if t.resp != nil {
			t.resp.Body.Close()
		}
		t.cancel(nil)
		t.outcome, t.reason = health.Neutral, ""
		rec.endTry(&t.try)
	} else {
		t.discard(rec, nil)
	}
	t.stop(nil)
	h.st.Release(t.slot)
}

// find is the retry state's search for a backend not tried yet: it sets
// *next.
func (h *hedging) find(next **upstream.Backend) retry.Find {
	return func() (bool, bool) {
		*next, _ = h.up.PickExcept(h.r, h.tried)
		if *next == nil || slices.Contains(h.tried, *next) {
			return false, false
		}
		return true, (*next).Health.Failing()
	}
}

// hedged runs a request hedging applies to (a GET, HEAD or OPTIONS without
// a body): the first try goes to b; every hedge.delay without an answer
// another copy goes to another backend, up to hedge.max and within the
// retry budget; a try that fails as the retry policy covers is retried
// after a back-off, as proxy does. The first answer wins and the other
// tries are canceled, their outcome Neutral, and waited for; when every
// try failed, the last failure is answered. 1xx responses are not
// relayed: several tries could send them.
func (g *Gateway) hedged(rec *recorder, w http.ResponseWriter, r *http.Request, up *upstream.Upstream, ap *retry.Settings, load retry.Load, b *upstream.Backend, uc UpstreamConfig) {
	base := g.withClientCert(r.Context(), rec.listener, r)
	base, stopDeadline := rec.grpc.withDeadline(base)
	defer stopDeadline()
	base, stopRequest := requestDeadline(base, uc.RequestTimeout) // every copy and retry
	defer stopRequest()
	st := ap.Start(load)
	defer st.Close()
	h := &hedging{g: g, r: r, up: up, rh: uc.ResponseHeaderTimeout, st: &st, base: base,
		results: make(chan *hedgeTry, retry.MaxAttempts+retry.MaxHedges)}
	h.launch(rec, b, false, 0)
	hedgeTimer := time.NewTimer(ap.Hedge().Delay)
	defer hedgeTimer.Stop()
	var backoff *time.Timer
	var backoffC <-chan time.Time
	var retryTo *upstream.Backend
	var pending retry.Decision // the retry waiting out its back-off
	var final *hedgeTry
	doneC := base.Done()
	for final == nil {
		select {
		case t := <-h.results:
			h.received(t)
			res := t.result(rec, r, nil, nil, true)
			d := retry.Decision{Verdict: retry.Stop, Condition: res.Condition()}
			if backoffC == nil {
				var next *upstream.Backend
				d = st.Retry(res, h.find(&next), func() bool { return next.TryAcquire() })
				retryTo = next
			}
			if d.Verdict == retry.NoBudget {
				g.obs.Metrics.RetryBudgetExhausted(up.Name())
			}
			switch {
			case d.Verdict == retry.Again:
				h.end(rec, t, false)
				pending = d
				backoff = time.NewTimer(d.Wait)
				backoffC = backoff.C
			case len(h.running) == 0 && backoffC == nil,
				t.err == nil && st.Policy().On&d.Condition == 0: // a 5xx in `on` is a failure: a running try may still answer
				final = t // the first answer, or the last failure
			default:
				h.end(rec, t, false) // failed; other tries go on
			}
		case <-backoffC:
			backoffC = nil
			g.obs.Metrics.Retry(up.Name(), pending.Condition.Label())
			h.launch(rec, retryTo, false, pending.Slot)
		case <-hedgeTimer.C:
			var next *upstream.Backend
			d := st.Hedge(h.find(&next), func() bool { return next.TryAcquire() })
			if d.Verdict == retry.NoBudget {
				g.obs.Metrics.RetryBudgetExhausted(up.Name())
			}
			if d.Verdict != retry.Again {
				break // no other backend to send a copy to, or the budget is spent
			}
			g.obs.Metrics.Hedge(up.Name(), false)
			h.launch(rec, next, true, d.Slot)
			if ap.Hedge().Next(st.Hedges()) {
				hedgeTimer.Reset(ap.Hedge().Delay)
			}
		case <-doneC:
			if len(h.running) > 0 {
				doneC = nil // their results follow, failed by the same context
				break
			}
			// Waiting out a back-off: nothing to relay.
			backoff.Stop()
			retryTo.Unclaim()
			st.Release(pending.Slot)
			rec.finish(w, up, nil, answer.ClientCanceled)
			return
		}
	}
	if backoffC != nil { // an answer came during a retry's back-off
		backoff.Stop()
		retryTo.Unclaim()
		st.Release(pending.Slot)
	}
	h.cancelOthers()
	defer h.endOthers(rec) // after the relay, before the Outcome
	if final.hedge && final.err == nil {
		g.obs.Metrics.Hedge(up.Name(), true)
	}
	final.final = true
	defer func() {
		rec.endTry(&final.try)
		final.stop(nil)
		st.Release(final.slot)
	}()
	g.relay(rec, w, r, up, &final.try, nil, nil, uc)
}

// cancelOthers cancels the running tries: another answered first.
func (h *hedging) cancelOthers() {
	for _, t := range h.running {
		t.stop(errHedgeLost)
	}
}

// endOthers ends each canceled try, Neutral, as its result arrives:
// canceled, they return at once. The request's Outcome then has them all.
func (h *hedging) endOthers(rec *recorder) {
	for range len(h.running) {
		h.end(rec, <-h.results, true)
	}
	h.running = nil
}

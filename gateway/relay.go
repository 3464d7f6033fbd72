package gateway

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/reqbody"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// sleep waits d, or until ctx is done; false in that case.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// relay ends the request with the outcome of its last try t: the backend's
// response copied to w, or the gateway's answer to its failure (502
// connect/reset before a response or an invalid 1xx use, 504 response
// header timeout), or a stream reset (http.ErrAbortHandler) when the
// backend fails after the response started. t's outcome is set for the
// caller's endTry (also when relay panics); t.cancel is called.
func (g *Gateway) relay(rec *recorder, w http.ResponseWriter, r *http.Request, up *upstream.Upstream, t *try, body *reqbody.Client, iw *interim, uc UpstreamConfig) {
	b := t.b
	defer t.cancel(nil)
	if t.err != nil {
		if f := body.Failed(); f != reqbody.OK {
			rec.clientBodyFailed(w, up, b, f, false)
			return
		}
		a, o := t.failure(rec, iw)
		if j := t.judged; j != nil && r.Context().Err() != nil {
			// The client left after the try failed (in the retry's
			// back-off): it gets nothing, the backend's failure stands.
			o = j.o
			if o == health.Failure {
				t.outcome, t.reason = o, j.a.Reason
			}
			t.status = j.a.Status
			rec.finish(w, up, b, a)
			return
		}
		if requestTimedOut(t.ctx) && r.Context().Err() == nil && a != answer.GRPCTimeout {
			// The exchange's budget ran out; the backend is blamed unless
			// the client was still sending its body (timeouts.go).
			a, o = answer.RequestTimeout, health.Neutral
			if body.SentWhole() {
				o = health.Failure
			}
		}
		if o == health.Failure {
			t.outcome, t.reason = o, a.Reason
		}
		t.status = a.Status
		g.log.Debug("backend round trip failed", "upstream", up.Name(), "backend", b.ID, "reason", a.Reason, "attempts", len(rec.out.Attempts())+1, "error", t.err)
		rec.finish(w, up, b, a)
		return
	}
	resp := t.resp
	defer resp.Body.Close()
	idle := watchBodyIdle(resp, uc.bodyIdleTimeout()) // timeouts.go
	defer idle.release(resp)
	rec.grpc.watch(resp)
	rec.setRequestID(resp.Header) // the gateway's ID, not the backend's own
	rec.corsFields(resp.Header)   // edge.go: response_headers, CORS
	var backendErr, clientErr error
	if cw := rec.compressWriter(w, r, resp); cw != nil {
		defer cw.Release()
		rec.out.BytesOut, backendErr, clientErr = wire.CopyResponse(cw, resp, r.ProtoMajor)
		if backendErr == nil && clientErr == nil {
			clientErr = cw.Close() // only a whole body ends as a valid encoding
		}
		rec.out.BytesOut = cw.Written() // the bytes the client got
	} else {
		rec.out.BytesOut, backendErr, clientErr = wire.CopyResponse(w, resp, r.ProtoMajor)
	}
	switch {
	case backendErr != nil && body.Failed() != reqbody.OK:
		// The backend answered early, then the connection broke on the
		// client's bad body: not the backend's failure.
		rec.clientBodyFailed(w, up, b, body.Failed(), true)
	case backendErr != nil && rec.grpc.expired():
		// Not the backend's failure: trailers with DEADLINE_EXCEEDED.
		rec.endStream(w, up, b, answer.GRPCTimeout)
	case backendErr != nil && idle.timedOut():
		// The backend went silent mid-body: its failure, and the truncated
		// body must not end cleanly.
		t.outcome, t.reason = health.Failure, answer.BodyIdleTimeout.Reason
		g.log.Debug("backend sent nothing for body_idle; resetting stream", "upstream", up.Name(), "backend", b.ID)
		rec.reset(up, b, resp.StatusCode, answer.BodyIdleTimeout)
	case backendErr != nil && requestTimedOut(t.ctx) && r.Context().Err() == nil && rec.grpc != nil:
		// The exchange's budget is spent, not the backend's health:
		// DEADLINE_EXCEEDED trailers where it can, else a reset.
		rec.endStream(w, up, b, answer.RequestTimeout)
	case backendErr != nil && requestTimedOut(t.ctx) && r.Context().Err() == nil:
		// A reset, recorded with the status the client got (as a body_idle
		// cut is), not against the backend's health.
		rec.reset(up, b, resp.StatusCode, answer.RequestTimeout)
	case backendErr != nil && r.Context().Err() == nil:
		t.outcome, t.reason = health.Failure, answer.BodyFailed.Reason
		g.log.Debug("backend failed mid-body; resetting stream", "upstream", up.Name(), "backend", b.ID, "error", backendErr)
		// Never end a truncated body cleanly: abort resets the HTTP/3 stream.
		rec.reset(up, b, resp.StatusCode, answer.BodyFailed)
	case clientErr != nil || backendErr != nil:
		rec.result(up, b, answer.ClientCanceled.Status, answer.ClientCanceled.Reason)
	default:
		t.outcome = health.Success
		if resp.StatusCode >= 500 {
			t.outcome, t.reason = health.Failure, "status "+strconv.Itoa(resp.StatusCode)
		}
		rec.result(up, b, resp.StatusCode, "")
	}
}

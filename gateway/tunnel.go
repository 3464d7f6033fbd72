package gateway

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// serveTunnel opens the tunnel tr that r asks for, through the route rt to
// up (the route's upstream, or the one its splits chose):
// an HTTP/1.1 upgrade to an HTTP/1.1 backend whatever the client spoke.
// An extended CONNECT (RFC 8441, RFC 9220) becomes a GET with "Upgrade:"
// (for WebSocket, with a key of the gateway's, whose accept it checks);
// the client gets the backend's 101 over HTTP/1.1, a 200 over HTTP/2 and
// HTTP/3. The tunnel then relays bytes both ways until both sides end it,
// counted as one request in flight to the backend, and holding its
// concurrency-limit slots (admission.go) until it closes.
//
// Answers of its own: 403 upgrade_not_allowed (the route does not list
// the protocol), 400 invalid_websocket_handshake (RFC 6455 §4.2.1, with
// "Sec-WebSocket-Version: 13" as §4.4 asks), 503 as any request
// (overloaded, no_healthy_backend, discovery_pending), 501
// upgrade_unsupported_backend (the backend picked speaks HTTP/2), 502 when
// the backend's 101 does not switch to the protocol asked for, or an
// extended CONNECT got a 2xx that is not a switch (upgrade_refused). A
// backend that refuses the upgrade with its own answer gets it relayed.
func (g *Gateway) serveTunnel(rec *recorder, w http.ResponseWriter, r *http.Request, rt *route.Route[*upstream.Upstream], up *upstream.Upstream, tr tunnel.Request, ap *retry.Settings) {
	if !tunnel.Allowed(rt.Upgrades, tr.Token) {
		rec.finish(w, up, nil, answer.UpgradeNotAllowed)
		return
	}
	if tr.Token == tunnel.WebSocket && !tunnel.ValidWebSocket(r, tr.Extended) {
		w.Header()["Sec-Websocket-Version"] = []string{tunnel.WebSocketVersion}
		rec.finish(w, up, nil, answer.WebSocketHandshake)
		return
	}
	held, ok := g.admit(rec, w, up) // the same concurrency limits as any request
	if !ok {
		return
	}
	defer held.release() // once the tunnel is closed
	b := g.pick(rec, w, r, up)
	if b == nil {
		return
	}
	if b.Scheme != transport.SchemeHTTP {
		// An HTTP/2 backend would need an extended CONNECT of its own,
		// which the backend must have announced: not done.
		b.Unclaim() // never contacted
		rec.finish(w, up, nil, answer.UpgradeBackend)
		return
	}
	st := ap.Start(held.upstream)
	defer st.Close()
	t := try{b: b, start: rec.out.Start, final: true}
	defer func() { rec.endTry(&t) }() // the handshake's try, when the tunnel is over
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	tried := []*upstream.Backend{b}
	var hsKey string // the Sec-WebSocket-Key of the handshake, if the gateway made one
	for n := 1; ; n++ {
		t.ctx = ctx
		t.trace = rec.out.Span.StartTry(r, t.b, n, false) // the handshake's client span
		var out *http.Request
		out, hsKey = tunnel.Outgoing(ctx, r, t.b, tr, t.trace)
		t.resp, t.err = t.b.Transport.RoundTrip(out)
		t.trace.RoundTripped()
		if t.err == nil {
			t.b.Answered()
		}
		t.trace.EndAtAnswer() // the handshake's span, not the tunnel's life
		st.Release(t.slot)    // a handshake retry holds its slot while it is sent
		if t.err == nil || !transport.IsConnectFailure(t.err) || ctx.Err() != nil {
			break
		}
		// The backend never saw the handshake: another may take it, as
		// any request's connect-failure retry (attempts.go).
		var next *upstream.Backend
		d := st.Retry(retry.Result{Failure: retry.ConnectFailure, Method: http.MethodGet, BodyKept: true},
			func() (bool, bool) {
				next, _ = up.PickExcept(r, tried)
				return next != nil, next != nil && next.Health.Failing()
			},
			func() bool { return next.TryAcquire() })
		if d.Verdict == retry.NoBudget {
			g.obs.Metrics.RetryBudgetExhausted(up.Name())
		}
		if d.Verdict != retry.Again {
			break
		}
		g.obs.Metrics.Retry(up.Name(), retry.ConnectFailure.Label())
		t.final, t.outcome, t.reason, t.status = false, health.Failure, transport.ReasonConnect, http.StatusBadGateway
		rec.endTry(&t)
		t = try{b: next, start: time.Now(), final: true, slot: d.Slot}
		tried = append(tried, next)
	}
	if t.err != nil {
		a := answer.ForFailure(transport.Classify(ctx, t.err))
		t.reason, t.status = a.Reason, a.Status
		if a.Backend {
			t.outcome = health.Failure
		}
		rec.finish(w, up, t.b, a)
		return
	}
	resp := t.resp
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		if tr.Extended && resp.StatusCode < 300 {
			// The client would take a 2xx for an open tunnel. The backend
			// answered, it just does not switch there: not its failure (a
			// few such handshakes must not eject every backend).
			t.outcome = health.Success
			rec.finish(w, up, t.b, answer.UpgradeRefused)
			return
		}
		t.outcome = health.Success
		if resp.StatusCode >= 500 {
			t.outcome, t.reason = health.Failure, "status "+resp.Status
		}
		rec.setRequestID(resp.Header)
		var cerr error
		if rec.out.BytesOut, _, cerr = wire.CopyResponse(w, resp, r.ProtoMajor); cerr != nil {
			rec.result(up, t.b, answer.ClientCanceled.Status, answer.ClientCanceled.Reason)
			return
		}
		rec.result(up, t.b, resp.StatusCode, "")
		return
	}
	backend, ok := resp.Body.(io.ReadWriteCloser)
	if !ok || !tunnel.Switched(resp, tr, hsKey) {
		resp.Body.Close()
		t.outcome, t.reason = health.Failure, answer.InvalidResponse.Reason
		rec.finish(w, up, t.b, answer.InvalidResponse)
		return
	}
	key := observe.TunnelKey{Listener: rec.listener, Upstream: up.Name(), Upgrade: tr.Token}
	tun := tunnel.New(g.obs.Metrics, key, tr, protocolOf(r), r.Body, backend)
	rec.setRequestID(resp.Header) // Answer copies it: the 101 or 200 carries the gateway's ID
	status, err := tun.Answer(w, r, resp)
	if err != nil {
		backend.Close()
		rec.result(up, t.b, answer.ClientCanceled.Status, answer.ClientCanceled.Reason)
		if r.ProtoMajor != 1 {
			panic(http.ErrAbortHandler)
		}
		return
	}
	t.outcome = health.Success
	rec.tunnel = tun // the Outcome reports its bytes and lifetime
	rec.result(up, t.b, status, "")
	clean := tun.Run(tunnel.SetOf(r.Context()))
	if tun.BackendBroke() {
		// The backend's side broke (it died, or a WebSocket ended without a
		// close frame): its failure, as a body cut short is.
		t.outcome, t.reason = health.Failure, answer.BodyFailed.Reason
		rec.result(up, t.b, status, answer.BodyFailed.Reason)
	}
	if !clean {
		panic(http.ErrAbortHandler) // HTTP/2, HTTP/3: a reset, never a clean end of a broken tunnel
	}
}

package gateway

import (
	"errors"
	"net/http"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/cors"
	"github.com/impulse-agent/impulse-agent/gateway/ingress"
	"github.com/impulse-agent/impulse-agent/gateway/reqbody"
	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// serve routes r, picks a backend and proxies the exchange. It is the
// handler of every listener; listener names the listener for metrics.
// refused, when its Status is set, is the ingress adapter's own answer to
// r (a request its protocol's framing makes malformed): r gets it, with
// the same Outcome as any other request.
//
// The steps (architecture.md "Request pipeline"): validate (URI length,
// method, target, an empty body's end, authority, path normalisation) →
// route → IP rules → early data → a redirect answered (edge_rules.go) →
// a CORS preflight answered (edge.go) → authentication → the split
// chosen (splits.go) → rate limits →
// path rewrite and request_headers (edge_rules.go) → concurrency
// limits → pick → the
// attempts (attempts.go, hedge.go; tunnels: tunnel.go; the response's
// CORS fields and encoding: edge.go) → one Outcome (recorder.go). The
// answers the gateway gives itself are answer.All.
func (g *Gateway) serve(listener string, w http.ResponseWriter, r *http.Request, refused answer.Answer) {
	var rec recorder
	rec.begin(g, listener, w, r)
	defer rec.emit()
	if refused.Status != 0 {
		rec.finish(w, nil, nil, refused)
		return
	}
	tbl := g.table.Load()
	lim := g.limitsFor(listener)
	if len(r.RequestURI) > lim.MaxURIBytes {
		rec.finish(w, nil, nil, answer.URITooLong)
		return
	}
	if !route.ValidMethod(r.Method) {
		// Go's HTTP/2 server passes any :method (its HTTP/1.1 server and
		// quic-go do not); net/http's HTTP/1.1 transport would then refuse
		// it (a 502 blamed on the backend), x/net/http2's send it
		// (FuzzIngress).
		rec.malformed(w, answer.InvalidMethod)
		return
	}
	tr, tunneled := tunnel.Of(r)
	if r.Method == http.MethodConnect && !tr.Extended {
		// Plain CONNECT: the gateway is not a forward proxy.
		rec.finish(w, nil, nil, answer.MethodNotSupported)
		return
	}
	if r.RequestURI != "" && !validRequestTarget(r.RequestURI) { // "": built in process, not received
		// A space or "#": the backend would get a rewritten path, not the
		// one sent (Go's url parser escapes it).
		rec.finish(w, nil, nil, answer.InvalidPath)
		return
	}
	if r.ContentLength == 0 && r.Body != nil && r.Body != http.NoBody {
		// "content-length: 0": the request goes out without a body, so the
		// stream must end right here (RFC 9114 §4.1.2), as reqbody checks
		// for longer ones.
		sb := reqbody.WatchStall(w, r.Body, lim.ClientBodyTimeout)
		err := reqbody.ConfirmEnd(sb)
		sb.Stop()
		if err != nil {
			rec.clientBodyFailed(w, nil, nil, reqbody.Kind(err), false)
			return
		}
	}
	if !validAuthority(r.Host) || r.Host == "" && r.RequestURI != "" && r.ProtoMajor >= 2 {
		// An HTTP/2 request with neither :authority nor Host cannot be
		// routed by host nor forwarded with one (quic-go refuses it on
		// HTTP/3, Go's HTTP/1.1 server without Host on HTTP/1.1).
		rec.malformed(w, answer.InvalidAuthority)
		return
	}
	path, err := normalizeTarget(r, g.paths.Load())
	if err != nil {
		g.log.Debug("path cannot be routed safely", "path", r.RequestURI, "error", err)
		rec.finish(w, nil, nil, answer.InvalidPath)
		return
	}
	if !g.authorizeMesh(&rec, w, r, listener) { // 403 intention_denied on a mesh listener (mesh.go)
		return
	}
	method := r.Method
	if tr.Extended {
		method = http.MethodGet // what the backend gets (tunnel.go)
	}
	rt := tbl.routes.Match(r.Host, path, method)
	preflight := false
	if r.Method == http.MethodOptions {
		// A CORS preflight is about the request it announces: the route of
		// that method answers it when it has a cors block (edge.go).
		if prt := tbl.preflightRoute(r, path); prt != nil {
			rt, method, preflight = prt, cors.RequestedMethod(r), true
		}
	}
	if rt == nil {
		rec.finish(w, nil, nil, answer.NoRoute)
		return
	}
	if lax, ok := pathnorm.LaxReading(path); ok && tbl.routes.Match(r.Host, lax, method) != rt {
		// "//api/x" routed by "/" reaches a backend that merges slashes as
		// its "/api/x", past the "/api/" route's policies.
		g.log.Debug("path cannot be routed safely: read with slashes merged or ';' parameters dropped, it is another route's",
			"path", r.RequestURI, "read_as", lax)
		rec.finish(w, nil, nil, answer.InvalidPath)
		return
	}
	rec.routed(rt.Pattern(), rt.Host)
	rec.edge = tbl.edgeOf(rt) // CORS, compression (edge.go)
	up := rt.Target
	if a := routeAdmits(tbl, rt, r); a.Status != 0 { // 403 ip_denied, 425 (clientaddr.go)
		rec.finish(w, up, nil, a)
		return
	}
	switch earlyDataAction(r.Method, ingress.InEarlyData(r)) {
	case earlyReject:
		rec.finish(w, up, nil, answer.TooEarly)
		return
	case earlyForward:
		r.Header["Early-Data"] = earlyDataOne
	}
	if rec.grpc.invalidTimeout() {
		rec.finish(w, up, nil, answer.GRPCTimeoutInvalid)
		return
	}
	if rec.edge != nil && rec.edge.redirect != nil { // answered at the edge, without an upstream (edge_rules.go)
		rec.answerRedirect(w, r, up, rec.edge.redirect, path)
		return
	}
	if preflight { // answered at the edge, without authentication (edge.go)
		if g.admitRate(&rec, w, r, tbl, rt, up) { // 429 (ratelimits.go): a preflight counts as any request
			rec.answerPreflight(w, r, up, rec.edge.cors)
		}
		return
	}
	if !g.authenticate(&rec, w, r, tbl, rt, path) { // 401, 503 auth_unavailable, forward auth's refusal (authn.go)
		return
	}
	up = rec.splitUpstream(r, up)              // a route's splits choose the upstream (splits.go)
	if !g.admitRate(&rec, w, r, tbl, rt, up) { // 429 (ratelimits.go)
		return
	}
	if rec.edge != nil && !rec.forwardRules(w, r, up, path) { // path rewrite, request_headers (edge_rules.go)
		return
	}
	if tunneled {
		g.serveTunnel(&rec, w, r, rt, up, tr, rec.attempts(tbl, up)) // no body limits: the bytes are the tunnel's
		return
	}
	maxBody := bodyLimit(lim, tbl, up)
	if maxBody > 0 && r.ContentLength > maxBody {
		closeConnAfter(w, r)
		rec.finish(w, up, nil, answer.BodyTooLarge)
		return
	}
	// Admission before the body is touched: a refusal goes out at once, and
	// Go's HTTP/1.1 server sends it without waiting for (or asking with 100
	// Continue for) a body nobody wrapped yet.
	held, ok := g.admit(&rec, w, up) // concurrency limits (admission.go)
	if !ok {
		return
	}
	defer held.release() // once the response is done
	reqbody.Settle(w, r) // before a backend is picked: it may wait for the body's first byte
	rec.body, rec.maxBody = reqbody.Limit(w, r, maxBody, lim.ClientBodyTimeout), maxBody
	defer rec.body.Stop()
	b := g.pick(&rec, w, r, up) // acquired: within max_requests_per_backend
	if b == nil {
		return
	}
	g.proxy(&rec, w, r, up, rec.attempts(tbl, up), held.upstream, b, rec.upstreamConfig(tbl, up)) // attempts.go: round trips, retry or hedge, copy back
}

// errClosed is returned by Apply after Shutdown.
var errClosed = errors.New("gateway: closed")

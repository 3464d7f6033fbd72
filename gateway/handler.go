package gateway

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// serve routes r, picks a backend and proxies the exchange. It is the
// handler of every listener; listener names the listener for metrics.
//
// Requests for a tunnel (WebSocket) go to serveTunnel once routed.
//
// Answers it produces itself (interface.md): 414, 413 and 408 from the
// listener's limits (limits.go), 404 no route, 425 an unsafe method in
// early data (earlydata.go), 429 from the listener's and then the
// upstream's rate limit, right after routing and validation, before
// anything else counts the request (ratelimits.go), 503 overloaded over a
// concurrency limit (admission.go), 503 no eligible
// backend (never a fall-through to another route), 502 connect/reset before
// a response or an invalid 1xx use (a 101, too many 1xx: interim.go), 504
// response-header timeout or request timeout (timeouts.go), and a stream reset
// (http.ErrAbortHandler → H3_INTERNAL_ERROR, RFC 9114 §8.1) when the backend
// fails after the response started (body_idle, request timeout: timeouts.go). gRPC calls (grpc.go) are bounded by
// their grpc-timeout and end a started response with gRPC trailers, not a
// reset, where they can.
func (g *Gateway) serve(listener string, w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := recorder{g: g, listener: listener, r: r, start: start, grpc: newGRPCCall(w, r, start)}
	tbl := g.table.Load()
	lim := g.limitsFor(listener)
	if len(r.RequestURI) > lim.MaxURIBytes {
		rec.finish(w, nil, nil, http.StatusRequestURITooLong, reasonURITooLong)
		return
	}
	tr, tunneled := tunnelOf(r) // upgrade.go
	if r.Method == http.MethodConnect && !tr.extended {
		// Plain CONNECT: the gateway is not a forward proxy.
		rec.finish(w, nil, nil, http.StatusNotImplemented, transport.ReasonNotImplemented)
		return
	}
	if r.RequestURI != "" && !validRequestTarget(r.RequestURI) { // "": built in process, not received
		// A space or "#": the backend would get a rewritten path, not the
		// one sent (Go's url parser escapes it).
		rec.finish(w, nil, nil, http.StatusBadRequest, transport.ReasonInvalidPath)
		return
	}
	if r.ContentLength == 0 && r.Body != nil && r.Body != http.NoBody {
		// "content-length: 0": the request goes out without a body, so the
		// stream must end right here (RFC 9114 §4.1.2), as exactBody checks
		// for longer ones.
		sb := watchStall(w, r.Body, lim.ClientBodyTimeout)
		err := (&exactBody{ReadCloser: sb}).confirmEnd()
		sb.stop()
		if err != nil {
			rec.clientBodyFailed(w, nil, nil, bodyErrorKind(err), false)
			return
		}
	}
	if !validAuthority(r.Host) {
		rec.malformed(w, reasonInvalidAuthority)
		return
	}
	path, err := normalizeTarget(r, g.paths.Load())
	if err != nil {
		g.log.Debug("path cannot be routed safely", "path", r.RequestURI, "error", err)
		rec.finish(w, nil, nil, http.StatusBadRequest, transport.ReasonInvalidPath)
		return
	}
	method := r.Method
	if tr.extended {
		method = http.MethodGet // what the backend gets (tunnel.go)
	}
	rt := tbl.routes.Match(r.Host, path, method)
	if rt == nil {
		rec.finish(w, nil, nil, http.StatusNotFound, transport.ReasonNoRoute)
		return
	}
	up := rt.Target
	switch earlyDataAction(r.Method, inEarlyData(r)) {
	case earlyReject:
		rec.finish(w, up, nil, http.StatusTooEarly, reasonTooEarly)
		return
	case earlyForward:
		r.Header["Early-Data"] = earlyDataOne
	}
	if rec.grpc.invalidTimeout() {
		rec.finish(w, up, nil, http.StatusBadRequest, reasonGRPCTimeoutInvalid)
		return
	}
	if !g.admitRate(rec, w, r, tbl, rt) { // 429 (ratelimits.go)
		return
	}
	if tunneled {
		g.serveTunnel(rec, w, r, rt, tr) // no body limits: the bytes are the tunnel's
		return
	}
	maxBody := bodyLimit(lim, tbl, up)
	if maxBody > 0 && r.ContentLength > maxBody {
		closeConnAfter(w, r)
		rec.finish(w, up, nil, http.StatusRequestEntityTooLarge, reasonBodyTooLarge)
		return
	}
	settleBody(w, r) // before a backend is picked: it may wait for the body's first byte
	defer limitBody(w, r, maxBody, lim.ClientBodyTimeout).stop()
	held, ok := g.admit(rec, w, up) // concurrency limits (admission.go)
	if !ok {
		return
	}
	defer held.release() // once the response is done
	b := g.pick(rec, w, r, up)
	if b == nil {
		return
	}
	outcome, failReason := health.Neutral, ""
	defer func() { b.Done(outcome, failReason, time.Since(start)) }()
	traced, iw := withInterim(w, r)
	traced = g.withClientCert(traced, listener, r)
	traced, stopDeadline := rec.grpc.withDeadline(traced) // grpc.go
	defer stopDeadline()
	uc := tbl.configs[up.Name()]
	// The request timeout is set once for the whole exchange (timeouts.go):
	// every attempt and the copy of the response body share it.
	traced, stopRequest := requestDeadline(traced, uc.RequestTimeout)
	defer stopRequest()
	resp, ctx, cancel, body, err := roundTrip(traced, r, b, up.Config().ResponseHeaderTimeout)
	iw.finish() // no 1xx after this: w is the handler's again
	defer cancel(nil)
	if err == nil && resp.StatusCode < 200 {
		// Only a 101 arrives as a final response (net/http), and the
		// gateway never forwards Upgrade.
		resp.Body.Close()
		resp, err = nil, errSwitchingProtocols
	}
	if err != nil {
		if f := body.failed(); f != bodyOK {
			rec.clientBodyFailed(w, up, b, f, false)
			return
		}
		status, reason := transport.Classify(ctx, err)
		if iw.invalidResponse(err) {
			status, reason = http.StatusBadGateway, transport.ReasonInvalidResponse
		}
		if requestTimedOut(ctx) && r.Context().Err() == nil {
			status, reason = http.StatusGatewayTimeout, reasonRequestTimeout
		}
		if rec.grpc.expired() { // the client's deadline, not the backend's failure
			status, reason = http.StatusGatewayTimeout, reasonGRPCTimeout
		}
		// A stream the backend left unprocessed (graceful GOAWAY; a body too
		// long to send again) is not its failure, nor is a request timeout
		// that passed while the client was still sending its body.
		if status != transport.StatusClientClosed && reason != reasonGRPCTimeout && !transport.IsGracefulGoAway(err) && !errors.Is(err, errNotReplayable) &&
			(reason != reasonRequestTimeout || body.sentWhole()) {
			outcome, failReason = health.Failure, reason
		}
		g.log.Debug("backend round trip failed", "upstream", up.Name(), "backend", b.ID, "reason", reason, "error", err)
		rec.finish(w, up, b, status, reason)
		return
	}
	defer resp.Body.Close()
	idle := watchBodyIdle(resp, uc.bodyIdleTimeout()) // timeouts.go
	defer idle.release(resp)
	rec.grpc.watch(resp)
	backendErr, clientErr := copyResponse(w, resp, r.ProtoMajor)
	switch {
	case backendErr != nil && body.failed() != bodyOK:
		// The backend answered early, then the connection broke on the
		// client's bad body: not the backend's failure.
		rec.clientBodyFailed(w, up, b, body.failed(), true)
	case backendErr != nil && rec.grpc.expired():
		// Not the backend's failure: trailers with DEADLINE_EXCEEDED.
		rec.endStream(w, up, b, http.StatusGatewayTimeout, reasonGRPCTimeout)
	case backendErr != nil && idle.timedOut():
		// The backend went silent mid-body: its failure, and the truncated
		// body must not end cleanly.
		outcome, failReason = health.Failure, reasonBodyIdleTimeout
		g.log.Debug("backend sent nothing for body_idle; resetting stream", "upstream", up.Name(), "backend", b.ID)
		rec.record(up, b, resp.StatusCode, reasonBodyIdleTimeout)
		panic(http.ErrAbortHandler)
	case backendErr != nil && requestTimedOut(ctx) && r.Context().Err() == nil:
		// The exchange's budget is spent, not the backend's health: a
		// reset (gRPC: DEADLINE_EXCEEDED trailers where it can).
		rec.endStream(w, up, b, http.StatusGatewayTimeout, reasonRequestTimeout)
	case backendErr != nil && r.Context().Err() == nil:
		outcome, failReason = health.Failure, transport.ReasonBodyFailed
		g.log.Debug("backend failed mid-body; resetting stream", "upstream", up.Name(), "backend", b.ID, "error", backendErr)
		rec.record(up, b, resp.StatusCode, transport.ReasonBodyFailed)
		// Never end a truncated body cleanly: abort resets the HTTP/3 stream.
		panic(http.ErrAbortHandler)
	case clientErr != nil || backendErr != nil:
		rec.record(up, b, transport.StatusClientClosed, transport.ReasonClientCanceled)
	default:
		outcome = health.Success
		if resp.StatusCode >= 500 {
			outcome, failReason = health.Failure, "status "+strconv.Itoa(resp.StatusCode)
		}
		rec.record(up, b, resp.StatusCode, "")
	}
}

// recorder carries what every outcome of one request is recorded with.
type recorder struct {
	g        *Gateway
	listener string
	r        *http.Request
	start    time.Time
	grpc     *grpcCall // nil unless a gRPC request
}

// clientBodyFailed ends a request whose body the client did not deliver,
// without blaming the backend. A body that disagrees with Content-Length
// (short or long) or has malformed trailers makes the request malformed: a
// stream error of type H3_MESSAGE_ERROR (RFC 9114 §4.1.2), or a reset if the
// response had started. A canceled one is recorded as 499 and the stream
// reset: never a clean, empty 200.
func (rec recorder) clientBodyFailed(w http.ResponseWriter, up *upstream.Upstream, b *upstream.Backend, failure int32, started bool) {
	if status, reason := bodyLimitAnswer(failure); status != 0 {
		// A limit, not a malformed request: answered while it can be.
		if started {
			rec.endStream(w, up, b, status, reason) // gRPC trailers if it can (grpc.go)
			return
		}
		closeConnAfter(w, rec.r)
		rec.finish(w, up, b, status, reason)
		return
	}
	reason := transport.ReasonClientBodyIncomplete
	switch failure {
	case bodyMalformed:
		reason = transport.ReasonClientBodyMalformed
	case bodyCanceled:
		rec.record(up, b, transport.StatusClientClosed, transport.ReasonClientCanceled)
		panic(http.ErrAbortHandler)
	}
	if hs, ok := w.(http3.HTTPStreamer); ok && !started {
		if str, err := hs.HTTPStream(); err == nil {
			rec.record(up, b, http.StatusBadRequest, reason)
			str.CancelRead(quic.StreamErrorCode(http3.ErrCodeMessageError))
			str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeMessageError))
			return
		}
	}
	if !started && rec.r.ProtoMajor == 1 {
		// HTTP/1.1 has no stream error: a 400, and the connection closes
		// (its framing is lost). An HTTP/2 stream x/net/http2 already
		// reset takes no answer, hence the abort below.
		closeConnAfter(w, rec.r)
		rec.finish(w, up, b, http.StatusBadRequest, reason)
		return
	}
	rec.record(up, b, http.StatusBadRequest, reason)
	panic(http.ErrAbortHandler)
}

// finish answers with a gateway-produced error and records it.
func (rec recorder) finish(w http.ResponseWriter, up *upstream.Upstream, b *upstream.Backend, status int, reason string) {
	if status == transport.StatusClientClosed {
		// Nothing to answer, and nothing must look like an answer: on a
		// TCP connection still open, returning would send an empty 200.
		rec.record(up, b, status, reason)
		panic(http.ErrAbortHandler)
	}
	if isGRPC(rec.r.Header) {
		writeGRPCError(w, status, reason)
		rec.record(up, b, status, reason)
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Impulse-Error"] = []string{reason}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(http.StatusText(status) + ": " + reason + "\n"))
	rec.record(up, b, status, reason)
}

// record emits the request metrics and the access-log line.
func (rec recorder) record(up *upstream.Upstream, b *upstream.Backend, status int, reason string) {
	g, r := rec.g, rec.r
	elapsed := time.Since(rec.start)
	upName, backendID := "", ""
	if up != nil {
		upName = up.Name()
	}
	if b != nil {
		backendID = b.ID
	}
	g.metrics.request(rec.listener, protocolOf(r), upName, status, reason, elapsed)
	grpcStatus := ""
	if rec.grpc != nil {
		grpcStatus = rec.grpc.outcome(status)
		g.metrics.grpcRequest(rec.listener, protocolOf(r), upName, status, grpcStatus)
	}
	if g.log.IsDebug() {
		args := []any{"method", r.Method, "host", r.Host, "path", r.URL.Path,
			"status", status, "reason", reason, "upstream", upName, "backend", backendID,
			"duration_ms", float64(elapsed.Microseconds()) / 1000, "remote", r.RemoteAddr}
		if grpcStatus != "" {
			args = append(args, "grpc_status", grpcStatus)
		}
		g.log.Debug("request", args...)
	}
}

// protocolOf is the protocol label of r: h1, h2 or h3.
func protocolOf(r *http.Request) string {
	switch r.ProtoMajor {
	case 3:
		return ProtocolH3
	case 2:
		return ProtocolH2
	}
	return ProtocolH1
}

var statusClasses = [...]string{"", "1xx", "2xx", "3xx", "4xx", "5xx"}

// statusClass is the code label: "2xx" and so on, the exact code outside
// 100..599 (499, logged only, is "4xx").
func statusClass(code int) string {
	if code < 100 || code > 599 {
		return strconv.Itoa(code)
	}
	return statusClasses[code/100]
}

// errClosed is returned by Apply after Shutdown.
var errClosed = errors.New("gateway: closed")

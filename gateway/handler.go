package gateway

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/route"
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
// fails after the response started (body_idle, request timeout: timeouts.go); the last three once the retry
// policy has no try left (attempts.go). gRPC calls (grpc.go) are bounded by
// their grpc-timeout and end a started response with gRPC trailers, not a
// reset, where they can.
func (g *Gateway) serve(listener string, w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := recorder{g: g, listener: listener, r: r, start: start, grpc: newGRPCCall(w, r, start),
		requestID: requestIDOf(r)} // before anything answers: every answer carries it (requestid.go)
	rec.startSpan() // tracing.go: after the ID, which the span carries
	tbl := g.table.Load()
	lim := g.limitsFor(listener)
	if len(r.RequestURI) > lim.MaxURIBytes {
		rec.finish(w, nil, nil, http.StatusRequestURITooLong, reasonURITooLong)
		return
	}
	if !route.ValidMethod(r.Method) {
		// Go's HTTP/2 server passes any :method (its HTTP/1.1 server and
		// quic-go do not); net/http's HTTP/1.1 transport would then refuse
		// it (a 502 blamed on the backend), x/net/http2's send it
		// (FuzzIngress).
		rec.malformed(w, reasonInvalidMethod)
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
	rec.routed(rt) // the span's name and http.route (tracing.go)
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
		g.serveTunnel(rec, w, r, rt, tr, attemptsOf(tbl, up)) // no body limits: the bytes are the tunnel's
		return
	}
	maxBody := bodyLimit(lim, tbl, up)
	if maxBody > 0 && r.ContentLength > maxBody {
		closeConnAfter(w, r)
		rec.finish(w, up, nil, http.StatusRequestEntityTooLarge, reasonBodyTooLarge)
		return
	}
	// Admission before the body is touched: a refusal goes out at once, and
	// Go's HTTP/1.1 server sends it without waiting for (or asking with 100
	// Continue for) a body nobody wrapped yet.
	held, ok := g.admit(rec, w, up) // concurrency limits (admission.go)
	if !ok {
		return
	}
	defer held.release() // once the response is done
	settleBody(w, r)     // before a backend is picked: it may wait for the body's first byte
	rec.body = limitBody(w, r, maxBody, lim.ClientBodyTimeout)
	defer rec.body.stop()
	b := g.pick(rec, w, r, up) // acquired: within max_requests_per_backend
	if b == nil {
		return
	}
	g.proxy(rec, w, r, up, attemptsOf(tbl, up), b, tbl.configs[up.Name()]) // attempts.go: round trips, retry or hedge, copy back
}

// recorder carries what every outcome of one request is recorded with.
type recorder struct {
	g        *Gateway
	listener string
	r        *http.Request
	start    time.Time
	grpc     *grpcCall // nil unless a gRPC request
	// attempts is how many tries the request made (retries and hedges
	// included; 0: none, answered before a backend was picked).
	attempts int
	// requestID is the request's x-request-id as a field value slice of
	// one entry, shared with r.Header (requestIDOf): sent to the backend,
	// set on every answer (setRequestID) and logged.
	requestID []string
	// traceID is the request's W3C trace ID (32 hex digits) whenever
	// tracing is on, sampled or not; "" when off. span is its server
	// span (nil: off; tracing.go).
	traceID string
	span    *serverSpan
	// body is the request body as read from the client (nil: none), which
	// counts the bytes relayed; bytesOut the response body bytes written
	// to the client. Both for the access log.
	body     *stallBody
	bytesOut int64
	// tunnel is set once a tunnel is open: its access-log line waits for
	// its end (accesslog.go).
	tunnel *tunnel
}

// id is the request's ID ("" for a recorder not made by serve).
func (rec recorder) id() string {
	if len(rec.requestID) == 0 {
		return ""
	}
	return rec.requestID[0]
}

// setRequestID sets the request's ID on response header h, replacing a
// backend's own x-request-id: the client sees the ID its backend got.
func (rec recorder) setRequestID(h http.Header) {
	if rec.requestID != nil {
		h[requestIDField] = rec.requestID
	}
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
	rec.setRequestID(w.Header())
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
	n, _ := w.Write([]byte(http.StatusText(status) + ": " + reason + "\n"))
	rec.bytesOut = int64(n)
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
	rec.endSpan(up, b, status, reason)     // tracing.go
	g.countResponse(up, b, status, reason) // traffic.go: the status page's counters
	grpcStatus := ""
	if rec.grpc != nil {
		grpcStatus = rec.grpc.outcome(status)
		g.metrics.grpcRequest(rec.listener, protocolOf(r), upName, status, grpcStatus)
	}
	g.logAccess(&rec, upName, backendID, status, reason, grpcStatus, elapsed) // accesslog.go
	if g.log.IsDebug() {
		args := []any{"request_id", rec.id(), "method", r.Method, "host", r.Host, "path", r.URL.Path,
			"status", status, "reason", reason, "upstream", upName, "backend", backendID,
			"duration_ms", float64(elapsed.Microseconds()) / 1000, "remote", r.RemoteAddr}
		if grpcStatus != "" {
			args = append(args, "grpc_status", grpcStatus)
		}
		if rec.attempts > 1 {
			args = append(args, "attempts", rec.attempts)
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

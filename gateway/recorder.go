package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/headers"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/reqbody"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// recorder builds the one Outcome of a request (architecture.md "Request
// pipeline", observe.Outcome): the pipeline sets its result once, with
// result or an answer of the gateway's own (finish, malformed, ...), each
// try ends in an Attempt as it is over (endTry), and emit, deferred by
// serve, hands the whole to every observer once, whatever path (or
// panic) ended the request.
type recorder struct {
	g        *Gateway
	listener string
	r        *http.Request
	w        http.ResponseWriter
	grpc     *grpcCall // nil unless a gRPC request
	// requestID is the request's x-request-id as a field value slice of
	// one entry, shared with r.Header (wire.RequestID): sent to the backend,
	// set on every answer (setRequestID) and logged.
	requestID []string
	// body is the request body as read from the client (nil: none), which
	// counts the bytes relayed; maxBody its limit (0: none).
	body    *reqbody.Stall
	maxBody int64
	// tunnel is the open tunnel, whose bytes and lifetime the Outcome
	// reports (nil: none).
	tunnel *tunnel.Tunnel
	// edge is the matched route's edge stages (edge.go; nil: none);
	// hvars the header rules' variables (edge_rules.go vars).
	edge  *routeEdge
	hvars headers.Vars
	// set: the result is in out.
	set bool
	out observe.Outcome
}

// unrecorded counts requests that ended without a result: a bug, which
// TestObserversAgree checks never happens.
var unrecorded atomic.Int64

// begin starts rec for r, before anything answers: every answer carries
// the request ID (requestid.go), and the server span starts with it.
func (rec *recorder) begin(g *Gateway, listener string, w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec.g, rec.listener, rec.r, rec.w = g, listener, r, w
	rec.grpc = newGRPCCall(w, r, start)
	rec.requestID = wire.RequestID(r)
	rec.out.Start, rec.out.Listener = start, listener
	rec.out.Span = g.obs.Tracing.StartServer(r, start, rec.id(), listener)
}

// id is the request's ID.
func (rec *recorder) id() string {
	if len(rec.requestID) == 0 {
		return ""
	}
	return rec.requestID[0]
}

// setRequestID sets the request's ID on response header h, replacing a
// backend's own x-request-id: the client sees the ID its backend got.
func (rec *recorder) setRequestID(h http.Header) {
	if rec.requestID != nil {
		h[wire.RequestIDField] = rec.requestID
	}
}

// routed notes the route r matched: the span's name and http.route.
func (rec *recorder) routed(pathPrefix, host string) {
	rec.out.Route = pathPrefix
	rec.out.Span.Routed(pathPrefix, host)
}

// result sets how the request ended: the upstream and the last try's
// backend (either nil), the status the client got and the gateway's
// reason ("" for a relayed answer).
func (rec *recorder) result(up *upstream.Upstream, b *upstream.Backend, status int, reason string) {
	rec.set = true
	rec.out.Upstream, rec.out.Backend, rec.out.Status, rec.out.Reason = up, b, status, reason
}

// emit completes the Outcome and hands it to the observers. serve defers
// it: it runs after every try ended, also when the handler panics to
// reset the stream.
func (rec *recorder) emit() {
	if !rec.set {
		unrecorded.Add(1)
		rec.g.log.Error("request ended without an outcome", "request_id", rec.id())
		return
	}
	o, r := &rec.out, rec.r
	o.Duration = time.Since(o.Start)
	o.Protocol, o.Proto, o.Method, o.Host, o.ClientAddress = protocolOf(r), r.Proto, r.Method, r.Host, r.RemoteAddr
	o.RequestID, o.TraceID = rec.id(), o.Span.TraceID()
	o.Peer = clientaddr.Socket(r)
	o.Path, o.Query = targetParts(r)
	if v := r.Header["User-Agent"]; len(v) > 0 {
		o.UserAgent = v[0]
	}
	if v := r.Header["Referer"]; len(v) > 0 {
		o.Referer = v[0]
	}
	if r.TLS != nil {
		o.SNI = r.TLS.ServerName
		if len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
			o.ClientCert = r.TLS.VerifiedChains[0][0]
		}
	}
	if t := rec.tunnel; t != nil {
		o.Tunnel = true
		o.BytesIn, o.BytesOut = t.Bytes()
	} else {
		o.BytesIn = rec.body.Received()
		if rec.maxBody > 0 && o.BytesIn > rec.maxBody {
			o.BytesIn = rec.maxBody // the limit's check read one byte more; none went on
		}
	}
	if rec.grpc != nil {
		o.GRPCStatus = rec.grpc.outcome(o.Status)
	}
	rec.g.obs.Record(o)
}

// finish answers with a gateway-produced answer a and records it, up and
// b being where the request went (either nil).
func (rec *recorder) finish(w http.ResponseWriter, up *upstream.Upstream, b *upstream.Backend, a answer.Answer) {
	if a.Status == answer.StatusClientClosed {
		// Nothing to answer, and nothing must look like an answer: on a
		// TCP connection still open, returning would send an empty 200.
		rec.result(up, b, a.Status, a.Reason)
		panic(http.ErrAbortHandler)
	}
	rec.setRequestID(w.Header())
	rec.corsFields(w.Header()) // edge.go: a script may read the gateway's answers too
	rec.result(up, b, a.Status, a.Reason)
	if wire.IsGRPC(rec.r.Header) {
		writeGRPCError(w, a)
		return
	}
	h := w.Header()
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Impulse-Error"] = []string{a.Reason}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(a.Status)
	n, _ := w.Write([]byte(http.StatusText(a.Status) + ": " + a.Reason + "\n"))
	rec.out.BytesOut = int64(n)
}

// malformed answers a malformed request (RFC 9114 §4.1.2, answer form
// StreamError) with a stream error of type H3_MESSAGE_ERROR on HTTP/3, a
// 400 elsewhere, recorded as a 400 with a's reason.
func (rec *recorder) malformed(w http.ResponseWriter, a answer.Answer) {
	if hs, ok := w.(http3.HTTPStreamer); ok {
		if str, err := hs.HTTPStream(); err == nil {
			rec.result(nil, nil, http.StatusBadRequest, a.Reason)
			str.CancelRead(quic.StreamErrorCode(http3.ErrCodeMessageError))
			str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeMessageError))
			return
		}
	}
	rec.finish(w, nil, nil, a)
}

// clientBodyFailed ends a request whose body the client did not deliver,
// without blaming the backend. A body that disagrees with Content-Length
// (short or long) or has malformed trailers makes the request malformed: a
// stream error of type H3_MESSAGE_ERROR (RFC 9114 §4.1.2), or a reset if the
// response had started. A canceled one is recorded as 499 and the stream
// reset: never a clean, empty 200.
func (rec *recorder) clientBodyFailed(w http.ResponseWriter, up *upstream.Upstream, b *upstream.Backend, failure reqbody.Failure, started bool) {
	if a, ok := bodyLimitAnswer(failure); ok {
		// A limit, not a malformed request: answered while it can be.
		if started {
			rec.endStream(w, up, b, a) // gRPC trailers if it can (grpc.go)
			return
		}
		closeConnAfter(w, rec.r)
		rec.finish(w, up, b, a)
		return
	}
	a := answer.ClientBodyIncomplete
	switch failure {
	case reqbody.Malformed:
		a = answer.ClientBodyMalformed
	case reqbody.Canceled:
		rec.result(up, b, answer.ClientCanceled.Status, answer.ClientCanceled.Reason)
		panic(http.ErrAbortHandler)
	}
	if hs, ok := w.(http3.HTTPStreamer); ok && !started {
		if str, err := hs.HTTPStream(); err == nil {
			rec.result(up, b, http.StatusBadRequest, a.Reason)
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
		rec.finish(w, up, b, a)
		return
	}
	rec.result(up, b, http.StatusBadRequest, a.Reason)
	panic(http.ErrAbortHandler)
}

// endStream records a failure after the response started and ends it: with
// gRPC trailers when grpcCall.end can, else by resetting the stream
// (http.ErrAbortHandler), never a clean end of a truncated body.
func (rec *recorder) endStream(w http.ResponseWriter, up *upstream.Upstream, b *upstream.Backend, a answer.Answer) {
	ended := rec.grpc.end(a)
	rec.result(up, b, a.Status, a.Reason)
	if !ended {
		panic(http.ErrAbortHandler)
	}
}

// reset records a failure after the response started, with the status the
// client got and a's reason, and resets the stream: never a clean end of
// a truncated body.
func (rec *recorder) reset(up *upstream.Upstream, b *upstream.Backend, status int, a answer.Answer) {
	rec.result(up, b, status, a.Reason)
	panic(http.ErrAbortHandler)
}

// endTry ends try t: its Attempt goes to the Outcome, its backend's
// passive health and in-flight count, and its span (exactly once per try).
func (rec *recorder) endTry(t *try) {
	a := observe.Attempt{Backend: t.b, Verdict: t.outcome, Reason: t.reason, Duration: time.Since(t.start),
		Final: t.final, Hedge: t.hedge, Trace: t.trace}
	a.Lost = t.ctx != nil && errors.Is(context.Cause(t.ctx), errHedgeLost)
	switch {
	case t.resp != nil:
		a.Status, a.Answered = t.resp.StatusCode, true
		switch {
		case t.outcome == health.Failure && t.reason != "" && !strings.HasPrefix(t.reason, "status "):
			a.ErrType = t.reason // cut mid-body (body_idle_timeout, body_failed)
		case a.Status >= 400:
			a.ErrType = strconv.Itoa(a.Status)
		}
	case t.err != nil && !a.Lost: // a lost copy was canceled for the winner: no error of its own
		a.Status, a.ErrType = t.status, t.reason
		if a.ErrType == "" {
			_, a.ErrType = transport.Classify(t.ctx, t.err)
		}
	}
	rec.g.obs.Attempted(&rec.out, a)
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

// targetParts splits the request target as the client sent it into its
// path and query (without "?"); for a request built in process, r.URL's.
func targetParts(r *http.Request) (path, query string) {
	t := r.RequestURI
	if t == "" {
		if r.URL == nil {
			return "", ""
		}
		return r.URL.Path, r.URL.RawQuery
	}
	if i := strings.IndexByte(t, '?'); i >= 0 {
		return t[:i], t[i+1:]
	}
	return t, ""
}

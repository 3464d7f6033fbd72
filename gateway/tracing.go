package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// Tracing (README "Tracing"). With Config.TracerProvider set, each request
// that reaches the pipeline gets a server span, a child of the client's W3C
// traceparent when it sent a valid one, ended once its outcome is recorded
// (record); each try to a backend (retries, hedged copies, a tunnel's
// handshake) gets a client span, a child of the server span, ended when the
// try is done. The backend gets the client span's context as traceparent
// (and the parent's tracestate): it sees its own try as parent. Whether a
// span is sampled is the provider's sampler's decision (the agent's honours
// the parent's flag). Without a provider nothing is added or parsed: a
// client's traceparent and tracestate go to the backend unchanged, as any
// other end-to-end field.

// tracerName is the instrumentation scope of the gateway's spans.
const tracerName = "github.com/impulse-agent/impulse-agent/gateway"

// Span attributes of the gateway's own (the others are semantic
// conventions, semconv v1.43).
const (
	attrRequestID = attribute.Key("impulse.request_id")
	attrListener  = attribute.Key("impulse.listener")
	attrUpstream  = attribute.Key("impulse.upstream")
	attrBackend   = attribute.Key("impulse.backend")
	attrAttempts  = attribute.Key("impulse.attempts")   // server span: tries made
	attrAttempt   = attribute.Key("impulse.attempt")    // client span: 1 for the first try
	attrHedge     = attribute.Key("impulse.hedge")      // client span: a hedged copy
	attrHedgeLost = attribute.Key("impulse.hedge_lost") // client span: another try answered first
	attrRouteHost = attribute.Key("impulse.route_host")
)

// traceContext reads and writes the W3C traceparent and tracestate fields.
var traceContext propagation.TraceContext

// tracer is the gateway's tracer of one TracerProvider.
type tracer struct{ t trace.Tracer }

// setTracerProvider switches the tracer new requests use (nil: off).
// Requests in flight keep theirs.
func (g *Gateway) setTracerProvider(tp trace.TracerProvider) {
	if tp == nil {
		g.tracer.Store(nil)
		return
	}
	g.tracer.Store(&tracer{t: tp.Tracer(tracerName)})
}

// serverSpan is a request's server span (recorder.span; nil: not traced).
type serverSpan struct {
	tr     *tracer
	span   trace.Span
	ctx    context.Context // holds span: the parent of the tries' spans
	method string          // the span name's method part (methodName)
	// ended is when the server span ended (zero before): a try's span
	// ending later is clamped to it, so children never outlive it.
	ended atomic.Int64 // UnixNano; hedged tries may end on other goroutines
}

// startSpan starts rec's server span when tracing is on, as a child of the
// client's traceparent if valid, and sets rec.traceID.
func (rec *recorder) startSpan() {
	tr := rec.g.tracer.Load()
	if tr == nil {
		return
	}
	r := rec.r
	parent := traceContext.Extract(context.Background(), propagation.HeaderCarrier(r.Header))
	method, original := methodName(r.Method)
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs, semconv.HTTPRequestMethodKey.String(method), semconv.URLScheme("https"), semconv.URLPath(r.URL.Path),
		semconv.NetworkProtocolName("http"), semconv.NetworkProtocolVersion(protocolVersion(r.ProtoMajor)),
		attrRequestID.String(rec.id()), attrListener.String(rec.listener))
	if original != "" {
		attrs = append(attrs, semconv.HTTPRequestMethodOriginal(original))
	}
	if host, port := splitHostPort(r.Host); host != "" {
		attrs = append(attrs, semconv.ServerAddress(host))
		if port > 0 {
			attrs = append(attrs, semconv.ServerPort(port))
		}
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		attrs = append(attrs, semconv.ClientAddress(ip))
	}
	if ua := r.Header["User-Agent"]; len(ua) > 0 {
		attrs = append(attrs, semconv.UserAgentOriginal(ua[0]))
	}
	ctx, span := tr.t.Start(parent, method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(rec.start), trace.WithAttributes(attrs...))
	rec.span = &serverSpan{tr: tr, span: span, ctx: ctx, method: method}
	rec.traceID = span.SpanContext().TraceID().String()
}

// routed names the server span after rt ("GET /api", semantic conventions:
// {method} {http.route}) and sets http.route to its path prefix.
func (rec *recorder) routed(rt *route.Route[*upstream.Upstream]) {
	s := rec.span
	if s == nil {
		return
	}
	s.span.SetName(s.method + " " + rt.PathPrefix)
	s.span.SetAttributes(semconv.HTTPRoute(rt.PathPrefix))
	if rt.Host != "" {
		s.span.SetAttributes(attrRouteHost.String(rt.Host))
	}
}

// endSpan ends rec's server span with the request's outcome: the status
// sent (none for 499, where nothing was), the gateway's reason as
// error.type (x-impulse-error on its answers; a reset's cause), the
// upstream, backend and tries. Error status for 5xx and for a response cut
// short (a reason with a status below 400); a 4xx is the client's.
func (rec recorder) endSpan(up *upstream.Upstream, b *upstream.Backend, status int, reason string) {
	s := rec.span
	if s == nil {
		return
	}
	var buf [6]attribute.KeyValue // one SetAttributes call: each grows the span's slice
	attrs := buf[:0]
	if status != transport.StatusClientClosed {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(status))
	}
	if up != nil {
		attrs = append(attrs, attrUpstream.String(up.Name()))
	}
	if b != nil {
		attrs = append(attrs, attrBackend.String(b.ID))
	}
	if rec.attempts > 0 {
		attrs = append(attrs, attrAttempts.Int(rec.attempts))
	}
	errType := reason
	if errType == "" && status >= 500 {
		errType = strconv.Itoa(status)
	}
	if errType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
	}
	sp := s.span
	sp.SetAttributes(attrs...)
	if status >= 500 || reason != "" && status < 400 {
		sp.SetStatus(codes.Error, errType)
	}
	now := time.Now()
	s.ended.Store(now.UnixNano())
	sp.End(trace.WithTimestamp(now))
}

// tryTrace is one try's client span and the trace context fields its
// backend request carries.
type tryTrace struct {
	span   trace.Span
	fields http.Header // Traceparent and Tracestate; a nil value removes the field
	// answered is when the round trip returned (roundTrip); endAt, when
	// set (answeredAt), the span's end: a try that is not relayed ends
	// there, not after the retry's back-off.
	answered, endAt time.Time
	server          *serverSpan // the parent, whose end bounds this one's
}

// roundTripped notes that the try's round trip returned (nil-safe).
func (tt *tryTrace) roundTripped() {
	if tt != nil {
		tt.answered = time.Now()
	}
}

// endAtAnswer makes the span end when the round trip returned: the try is
// discarded (nil-safe).
func (tt *tryTrace) endAtAnswer() {
	if tt != nil {
		tt.endAt = tt.answered
	}
}

// startTry starts the client span of rec's try number attempt (1: the
// first) to b; nil when the request is not traced.
func (rec *recorder) startTry(b *upstream.Backend, attempt int, hedge bool) *tryTrace {
	s := rec.span
	if s == nil {
		return nil
	}
	r := rec.r
	method, _ := methodName(r.Method)
	version := "1.1"
	if transport.IsHTTP2(b.Scheme) {
		version = "2"
	}
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(method),
		semconv.ServerAddress(b.Host), semconv.ServerPort(b.Port),
		semconv.URLFull(transport.URLScheme(b.Scheme) + "://" + b.HostPort() + r.URL.EscapedPath()), // no query: it may carry secrets
		semconv.NetworkProtocolVersion(version), attrBackend.String(b.ID), attrAttempt.Int(attempt)}
	if attempt > 1 {
		attrs = append(attrs, semconv.HTTPRequestResendCount(attempt-1))
	}
	if hedge {
		attrs = append(attrs, attrHedge.Bool(true))
	}
	ctx, span := s.tr.t.Start(s.ctx, method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	tt := &tryTrace{span: span, fields: make(http.Header, 2), server: s}
	traceContext.Inject(ctx, propagation.HeaderCarrier(tt.fields))
	if _, ok := tt.fields["Tracestate"]; !ok {
		tt.fields["Tracestate"] = nil // the client's must not outlive a parent the gateway did not take
	}
	return tt
}

// setFields puts the try's trace context on h, the backend request's
// header (nothing when tt is nil: tracing off).
func (tt *tryTrace) setFields(h http.Header) {
	if tt == nil {
		return
	}
	for k, v := range tt.fields {
		if v == nil {
			delete(h, k)
		} else {
			h[k] = v
		}
	}
}

// end ends t's client span (try.done): its status, or its error as
// error.type (the status for 4xx and 5xx answers, the reason of a failure),
// and whether a hedged copy lost to another try.
func (tt *tryTrace) end(t *try) {
	if tt == nil {
		return
	}
	errType, status := "", 0
	lost := t.ctx != nil && errors.Is(context.Cause(t.ctx), errHedgeLost)
	switch {
	case t.resp != nil:
		status = t.resp.StatusCode
		switch {
		case t.outcome == health.Failure && t.reason != "" && !strings.HasPrefix(t.reason, "status "):
			errType = t.reason // cut mid-body (body_idle_timeout, body_failed)
		case status >= 400:
			errType = strconv.Itoa(status)
		}
	case t.err != nil:
		errType = t.reason
		if errType == "" {
			_, errType = transport.Classify(t.ctx, t.err)
		}
	}
	tt.finish(status, errType, lost)
}

// endTunnel ends a tunnel's handshake span: the backend's answer, or
// reason when the round trip failed.
func (tt *tryTrace) endTunnel(resp *http.Response, reason string) {
	if tt == nil {
		return
	}
	errType, status := reason, 0
	if resp != nil {
		status = resp.StatusCode
		if status >= 400 {
			errType = strconv.Itoa(status)
		}
	}
	tt.finish(status, errType, false)
}

// finish ends the span with status (0: no response), errType (""; none)
// and lost (a hedged request's try another answered before).
func (tt *tryTrace) finish(status int, errType string, lost bool) {
	var buf [3]attribute.KeyValue
	attrs := buf[:0]
	if status != 0 {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(status))
	}
	if lost {
		attrs = append(attrs, attrHedgeLost.Bool(true))
	}
	if errType != "" {
		attrs = append(attrs, semconv.ErrorTypeKey.String(errType))
	}
	tt.span.SetAttributes(attrs...)
	if errType != "" && !lost {
		tt.span.SetStatus(codes.Error, errType)
	}
	end := tt.endAt
	if end.IsZero() {
		end = time.Now()
	}
	// The relayed try ends (try.done) just after the request was recorded
	// and its server span ended: a child outliving its parent by
	// microseconds makes Jaeger report clock skew.
	if e := tt.server.ended.Load(); e != 0 && end.UnixNano() > e {
		end = time.Unix(0, e)
	}
	tt.span.End(trace.WithTimestamp(end))
}

// methodName is m as the semantic conventions name it: a known method, or
// "_OTHER" with the original (a bounded set of span names).
func methodName(m string) (method, original string) {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch:
		return m, ""
	}
	return "_OTHER", m
}

// protocolVersion is network.protocol.version for an HTTP major version.
func protocolVersion(major int) string {
	switch major {
	case 3:
		return "3"
	case 2:
		return "2"
	}
	return "1.1"
}

// splitHostPort splits an authority into host and port (0: none).
func splitHostPort(authority string) (string, int) {
	host, p, err := net.SplitHostPort(authority)
	if err != nil {
		return strings.TrimSuffix(strings.TrimPrefix(authority, "["), "]"), 0
	}
	port, _ := strconv.Atoi(p)
	return host, port
}

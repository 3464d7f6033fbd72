package observe

import (
	"context"
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

	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// Tracing (README "Tracing"). With a TracerProvider set, each request that
// reaches the pipeline gets a server span, a child of the client's W3C
// traceparent when it sent a valid one, ended with its Outcome; each try
// to a backend (retries, hedged copies, a tunnel's handshake) gets a
// client span, a child of the server span, ended with its Attempt. The
// backend gets the client span's context as traceparent (and the parent's
// tracestate): it sees its own try as parent. Whether a span is sampled is
// the provider's sampler's decision (the agent's honours the parent's
// flag). Without a provider nothing is added or parsed: a client's
// traceparent and tracestate go to the backend unchanged, as any other
// end-to-end field.

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

// Tracing starts the spans of requests with the current TracerProvider.
type Tracing struct{ cur atomic.Pointer[tracer] }

// SetProvider switches the tracer new requests use (nil: off). Requests in
// flight keep theirs; the caller owns the provider's shutdown.
func (tg *Tracing) SetProvider(tp trace.TracerProvider) {
	if tp == nil {
		tg.cur.Store(nil)
		return
	}
	tg.cur.Store(&tracer{t: tp.Tracer(tracerName)})
}

// ServerSpan is a request's server span (nil: not traced; every method
// takes a nil receiver).
type ServerSpan struct {
	tr     *tracer
	span   trace.Span
	ctx    context.Context // holds span: the parent of the tries' spans
	method string          // the span name's method part (methodName)
	// ended is when the server span ended (zero before): a try's span
	// ending later is clamped to it, so children never outlive it.
	ended atomic.Int64 // UnixNano
}

// StartServer starts r's server span when tracing is on (nil otherwise),
// as a child of the client's traceparent if valid. start is the request's
// arrival, requestID its x-request-id, listener the listener's name.
func (tg *Tracing) StartServer(r *http.Request, start time.Time, requestID, listener string) *ServerSpan {
	tr := tg.cur.Load()
	if tr == nil {
		return nil
	}
	parent := traceContext.Extract(context.Background(), propagation.HeaderCarrier(r.Header))
	method, original := methodName(r.Method)
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs, semconv.HTTPRequestMethodKey.String(method), semconv.URLScheme("https"), semconv.URLPath(r.URL.Path),
		semconv.NetworkProtocolName("http"), semconv.NetworkProtocolVersion(protocolVersion(r.ProtoMajor)),
		attrRequestID.String(requestID), attrListener.String(listener))
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
		trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	return &ServerSpan{tr: tr, span: span, ctx: ctx, method: method}
}

// TraceID is the span's W3C trace ID (32 hex digits), sampled or not; ""
// for a nil span.
func (s *ServerSpan) TraceID() string {
	if s == nil {
		return ""
	}
	return s.span.SpanContext().TraceID().String()
}

// Routed names the span after the route matched ("GET /api", semantic
// conventions: {method} {http.route}) and sets http.route to its path
// prefix, and the route's host when it has one.
func (s *ServerSpan) Routed(pathPrefix, host string) {
	if s == nil {
		return
	}
	s.span.SetName(s.method + " " + pathPrefix)
	s.span.SetAttributes(semconv.HTTPRoute(pathPrefix))
	if host != "" {
		s.span.SetAttributes(attrRouteHost.String(host))
	}
}

// end ends the span with o: the status sent (none for 499, where nothing
// was), the gateway's reason as error.type (x-impulse-error on its
// answers; a reset's cause), the upstream, backend and tries. Error status
// for 5xx and for a response cut short (a reason with a status below
// 400); a 4xx is the client's.
func (s *ServerSpan) end(o *Outcome) {
	if s == nil {
		return
	}
	var buf [6]attribute.KeyValue // one SetAttributes call: each grows the span's slice
	attrs := buf[:0]
	status, reason := o.Status, o.Reason
	if status != transport.StatusClientClosed {
		attrs = append(attrs, semconv.HTTPResponseStatusCode(status))
	}
	if o.Upstream != nil {
		attrs = append(attrs, attrUpstream.String(o.Upstream.Name()))
	}
	if o.Backend != nil {
		attrs = append(attrs, attrBackend.String(o.Backend.ID))
	}
	if n := o.nAttempts; n > 0 {
		attrs = append(attrs, attrAttempts.Int(n))
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

// TryTrace is one try's client span and the trace context fields its
// backend request carries (nil: not traced; every method takes a nil
// receiver).
type TryTrace struct {
	span   trace.Span
	fields http.Header // Traceparent and Tracestate; a nil value removes the field
	// answered is when the round trip returned (RoundTripped); endAt, when
	// set (EndAtAnswer), the span's end: a try that is not relayed ends
	// there, not after the retry's back-off.
	answered, endAt time.Time
	server          *ServerSpan // the parent, whose end bounds this one's
}

// StartTry starts the client span of try number attempt (1: the first)
// of r to b; nil when the request is not traced.
func (s *ServerSpan) StartTry(r *http.Request, b *upstream.Backend, attempt int, hedge bool) *TryTrace {
	if s == nil {
		return nil
	}
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
	tt := &TryTrace{span: span, fields: make(http.Header, 2), server: s}
	traceContext.Inject(ctx, propagation.HeaderCarrier(tt.fields))
	if _, ok := tt.fields["Tracestate"]; !ok {
		tt.fields["Tracestate"] = nil // the client's must not outlive a parent the gateway did not take
	}
	return tt
}

// RoundTripped notes that the try's round trip returned.
func (tt *TryTrace) RoundTripped() {
	if tt != nil {
		tt.answered = time.Now()
	}
}

// EndAtAnswer makes the span end when the round trip returned: the try
// is discarded.
func (tt *TryTrace) EndAtAnswer() {
	if tt != nil {
		tt.endAt = tt.answered
	}
}

// SetFields puts the try's trace context on h, the backend request's
// header (nothing when tt is nil: tracing off).
func (tt *TryTrace) SetFields(h http.Header) {
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

// finish ends the span with status (0: no response), errType (""; none)
// and lost (a hedged request's try another answered before).
func (tt *TryTrace) finish(status int, errType string, lost bool) {
	if tt == nil {
		return
	}
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
	// A child outliving its parent by microseconds makes Jaeger report
	// clock skew.
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

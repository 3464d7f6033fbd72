package gateway

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// Client traceparents the tests send: W3C trace-context examples.
const (
	clientTraceID    = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpanID     = "00f067aa0ba902b7"
	sampledParent    = "00-" + clientTraceID + "-" + clientSpanID + "-01"
	notSampledParent = "00-" + clientTraceID + "-" + clientSpanID + "-00"
)

// newTestTracing is a provider that exports every ended span to the
// returned in-memory exporter at once, sampling as the agent's does
// (parent-based; every new trace).
func newTestTracing(t testing.TB) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// traceBackend answers 200 (or what answer says for the nth request,
// counted from 1) and keeps the traceparent and tracestate each request
// brought.
type traceBackend struct {
	mu     sync.Mutex
	n      atomic.Int64
	parent []string
	state  []string
	answer func(n int64, r *http.Request) int
}

func (b *traceBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := b.n.Add(1)
	b.mu.Lock()
	b.parent = append(b.parent, r.Header.Get("Traceparent"))
	b.state = append(b.state, strings.Join(r.Header.Values("Tracestate"), ","))
	b.mu.Unlock()
	status := http.StatusOK
	if b.answer != nil {
		status = b.answer(n, r)
	}
	w.WriteHeader(status)
}

func (b *traceBackend) seen() (parents, states []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.parent...), append([]string(nil), b.state...)
}

// tracedGet GETs path with the given trace fields ("" = none).
func tracedGet(t *testing.T, h *harness, path, traceparent, tracestate string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.base+path, nil)
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	if tracestate != "" {
		req.Header.Set("Tracestate", tracestate)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp
}

func attrOf(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func wantAttr(t *testing.T, s tracetest.SpanStub, k string, want any) {
	t.Helper()
	v, ok := attrOf(s, attribute.Key(k))
	if !ok {
		t.Errorf("span %q: no %s (attributes %v)", s.Name, k, s.Attributes)
		return
	}
	if got := v.AsInterface(); got != want {
		t.Errorf("span %q: %s = %v (%T), want %v (%T)", s.Name, k, got, got, want, want)
	}
}

// spansOf splits the exported spans into the server span and the client
// spans in attempt order.
// waitServerSpan waits until exp holds a server span: a tunnel's is ended
// when the gateway records the switch, just after the 101 is sent.
func waitServerSpan(t *testing.T, exp *tracetest.InMemoryExporter) {
	t.Helper()
	eventually(t, 5*time.Second, func() bool {
		for _, s := range exp.GetSpans() {
			if s.SpanKind == trace.SpanKindServer {
				return true
			}
		}
		return false
	}, "the server span")
}

func spansOf(t *testing.T, exp *tracetest.InMemoryExporter) (server tracetest.SpanStub, clients []tracetest.SpanStub) {
	t.Helper()
	servers := 0
	for _, s := range exp.GetSpans() {
		switch s.SpanKind {
		case trace.SpanKindServer:
			server = s
			servers++
		case trace.SpanKindClient:
			clients = append(clients, s)
		}
	}
	if servers != 1 {
		t.Fatalf("%d server spans, want 1: %v", servers, exp.GetSpans())
	}
	for _, c := range clients { // Jaeger reports clock skew otherwise
		if c.EndTime.After(server.EndTime) || c.StartTime.Before(server.StartTime) {
			t.Errorf("client span %v–%v outside its server span %v–%v", c.StartTime, c.EndTime, server.StartTime, server.EndTime)
		}
	}
	for i := 1; i < len(clients); i++ {
		for j := i; j > 0; j-- {
			a, _ := attrOf(clients[j-1], attribute.Key("impulse.attempt"))
			b, _ := attrOf(clients[j], attribute.Key("impulse.attempt"))
			if a.AsInt64() > b.AsInt64() {
				clients[j-1], clients[j] = clients[j], clients[j-1]
			}
		}
	}
	return server, clients
}

// TestTracingSpanTree: over every ingress protocol, a request with a
// sampled client traceparent gets a server span that is its child (same
// trace ID), with the HTTP semantic-convention attributes, and one client
// span, the server span's child; the backend gets the client span's context
// as its traceparent and the client's tracestate.
func TestTracingSpanTree(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		tp, exp := newTestTracing(t)
		be := &traceBackend{}
		srv := testbackend.NewH1(t, be)
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{staticUpstream("web", "/api", srv)}, TracerProvider: tp}, ListenerConfig{}, proto)
		resp := tracedGet(t, h, "/api/x", sampledParent, "vendor=abc")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		server, clients := spansOf(t, exp)
		if len(clients) != 1 {
			t.Fatalf("%d client spans, want 1", len(clients))
		}
		if server.SpanContext.TraceID().String() != clientTraceID || server.Parent.SpanID().String() != clientSpanID || !server.Parent.IsRemote() {
			t.Errorf("server span trace %s parent %s, want the client's %s/%s", server.SpanContext.TraceID(), server.Parent.SpanID(), clientTraceID, clientSpanID)
		}
		if server.Name != "GET /api" {
			t.Errorf("server span name %q", server.Name)
		}
		version := map[string]string{ProtocolH1: "1.1", ProtocolH2: "2", ProtocolH3: "3"}[proto]
		wantAttr(t, server, "http.request.method", "GET")
		wantAttr(t, server, "http.route", "/api")
		wantAttr(t, server, "http.response.status_code", int64(200))
		wantAttr(t, server, "network.protocol.version", version)
		wantAttr(t, server, "server.address", "127.0.0.1")
		wantAttr(t, server, "url.path", "/api/x")
		wantAttr(t, server, "impulse.upstream", "web")
		wantAttr(t, server, "impulse.listener", "test")
		wantAttr(t, server, "impulse.request_id", resp.Header.Get("X-Request-Id"))
		if _, ok := attrOf(server, "error.type"); ok || server.Status.Code == codes.Error {
			t.Errorf("a 200 has error.type or an error status: %v %v", server.Attributes, server.Status)
		}
		c := clients[0]
		if c.Parent.SpanID() != server.SpanContext.SpanID() || c.SpanContext.TraceID() != server.SpanContext.TraceID() {
			t.Errorf("client span parent %s, want the server span %s", c.Parent.SpanID(), server.SpanContext.SpanID())
		}
		wantAttr(t, c, "server.address", "127.0.0.1")
		wantAttr(t, c, "server.port", int64(specFor("0", srv).Port))
		wantAttr(t, c, "http.response.status_code", int64(200))
		wantAttr(t, c, "impulse.attempt", int64(1))
		wantAttr(t, c, "network.protocol.version", "1.1")
		if c.StartTime.Before(server.StartTime) || c.EndTime.Before(c.StartTime) {
			t.Errorf("client span %v..%v outside the server span from %v", c.StartTime, c.EndTime, server.StartTime)
		}
		parents, states := be.seen()
		want := "00-" + clientTraceID + "-" + c.SpanContext.SpanID().String() + "-01"
		if len(parents) != 1 || parents[0] != want {
			t.Errorf("backend got traceparent %q, want %q (its client span)", parents, want)
		}
		if len(states) != 1 || states[0] != "vendor=abc" {
			t.Errorf("backend got tracestate %q", states)
		}
	})
}

// TestTracingNewTrace: without a client traceparent the server span is a
// root of a new trace and the backend gets that trace's context.
func TestTracingNewTrace(t *testing.T) {
	tp, exp := newTestTracing(t)
	be := &traceBackend{}
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{staticUpstream("web", "/", testbackend.NewH1(t, be))}, TracerProvider: tp}, ListenerConfig{}, ProtocolH3)
	tracedGet(t, h, "/", "", "vendor=stale")
	server, clients := spansOf(t, exp)
	if server.Parent.IsValid() || len(clients) != 1 {
		t.Fatalf("server span parent %v, %d client spans", server.Parent, len(clients))
	}
	parents, states := be.seen()
	want := "00-" + server.SpanContext.TraceID().String() + "-" + clients[0].SpanContext.SpanID().String() + "-01"
	if parents[0] != want {
		t.Errorf("backend traceparent %q, want %q", parents[0], want)
	}
	if states[0] != "" {
		t.Errorf("a tracestate without its traceparent reached the backend: %q", states[0])
	}
}

// TestTracingNotSampled: a parent that is not sampled is honoured: no span
// is exported, and the backend still gets the trace's context (the same
// trace ID, the sampled flag off) with the gateway's span as parent.
func TestTracingNotSampled(t *testing.T) {
	tp, exp := newTestTracing(t)
	be := &traceBackend{}
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{staticUpstream("web", "/", testbackend.NewH1(t, be))}, TracerProvider: tp}, ListenerConfig{}, ProtocolH2)
	if resp := tracedGet(t, h, "/", notSampledParent, ""); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if spans := exp.GetSpans(); len(spans) != 0 {
		t.Errorf("%d spans exported for a not-sampled parent", len(spans))
	}
	parents, _ := be.seen()
	p := strings.Split(parents[0], "-")
	if len(p) != 4 || p[1] != clientTraceID || p[2] == clientSpanID || p[3] != "00" {
		t.Errorf("backend traceparent %q: want trace %s, another span, flags 00", parents[0], clientTraceID)
	}
}

// TestTracingOffPassesThrough: without a TracerProvider the client's
// traceparent and tracestate reach the backend unchanged, and none is made
// up when it sent none.
func TestTracingOffPassesThrough(t *testing.T) {
	be := &traceBackend{}
	h := newHarnessOver(t, ProtocolH1, staticUpstream("web", "/", testbackend.NewH1(t, be)))
	tracedGet(t, h, "/", sampledParent, "vendor=abc")
	tracedGet(t, h, "/", "", "")
	parents, states := be.seen()
	if parents[0] != sampledParent || states[0] != "vendor=abc" || parents[1] != "" || states[1] != "" {
		t.Errorf("backend got traceparents %q, tracestates %q", parents, states)
	}
}

// TestTracingRetry: a retried request has one client span per try, each a
// child of the server span: the first with the 503 as error.type, ended
// when it got it (the back-off is the gap before the next), the second
// with its 200 and the resend count; the server span counts both.
func TestTracingRetry(t *testing.T) {
	tp, exp := newTestTracing(t)
	be := &traceBackend{answer: func(n int64, r *http.Request) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	}}
	uc := staticUpstream("web", "/", testbackend.NewH1(t, be), testbackend.NewH1(t, be))
	uc.Retry = retry.Default()
	uc.Retry.On |= retry.Status503
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{uc}, TracerProvider: tp}, ListenerConfig{}, ProtocolH3)
	if resp := tracedGet(t, h, "/r", sampledParent, ""); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	server, clients := spansOf(t, exp)
	if len(clients) != 2 {
		t.Fatalf("%d client spans, want 2", len(clients))
	}
	wantAttr(t, server, "impulse.attempts", int64(2))
	for i, c := range clients {
		if c.Parent.SpanID() != server.SpanContext.SpanID() {
			t.Errorf("try %d: parent %s, want the server span", i+1, c.Parent.SpanID())
		}
		wantAttr(t, c, "impulse.attempt", int64(i+1))
	}
	wantAttr(t, clients[0], "http.response.status_code", int64(503))
	wantAttr(t, clients[0], "error.type", "503")
	if clients[0].Status.Code != codes.Error {
		t.Errorf("first try status %v", clients[0].Status)
	}
	wantAttr(t, clients[1], "http.response.status_code", int64(200))
	wantAttr(t, clients[1], "http.request.resend_count", int64(1))
	if clients[0].EndTime.After(clients[1].StartTime) {
		t.Errorf("the first try's span ends at %v, after the retry started at %v: it must end with its answer, not the back-off",
			clients[0].EndTime, clients[1].StartTime)
	}
	if clients[0].Attributes == nil || clients[0].SpanContext.SpanID() == clients[1].SpanContext.SpanID() {
		t.Error("the tries share a span")
	}
	parents, _ := be.seen()
	if len(parents) != 2 || parents[0] == parents[1] {
		t.Errorf("backend traceparents %q: each try must carry its own span", parents)
	}
}

// TestTracingHedge: a hedged request shows both tries: the copy (hedge),
// which answered, and the first, canceled as lost, without an error
// status.
func TestTracingHedge(t *testing.T) {
	tp, exp := newTestTracing(t)
	be := &traceBackend{answer: func(n int64, r *http.Request) int {
		if n == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
		return http.StatusOK
	}}
	uc := staticUpstream("web", "/", testbackend.NewH1(t, be), testbackend.NewH1(t, be))
	uc.Hedge = retry.Hedge{Delay: 20 * time.Millisecond, Max: 1}
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{uc}, TracerProvider: tp}, ListenerConfig{}, ProtocolH1)
	if resp := tracedGet(t, h, "/h", "", ""); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	eventually(t, 5*time.Second, func() bool { return len(exp.GetSpans()) == 3 }, "the lost try's span")
	_, clients := spansOf(t, exp)
	first, copy := clients[0], clients[1]
	wantAttr(t, copy, "impulse.hedge", true)
	wantAttr(t, copy, "http.response.status_code", int64(200))
	wantAttr(t, first, "impulse.hedge_lost", true)
	if first.Status.Code == codes.Error {
		t.Errorf("the lost try has an error status: %v", first.Status)
	}
}

// TestTracingGatewayAnswer: the gateway's own answers are traced too: a
// 404 without a route has its reason as error.type, no client span, and is
// named by its method alone; a 502 from a backend that is down is an
// error on both spans.
func TestTracingGatewayAnswer(t *testing.T) {
	tp, exp := newTestTracing(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // connect refused
	uc := staticUpstream("down", "/down", dead)
	uc.Retry = retry.Default()
	uc.Retry.Attempts = 1
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{uc}, TracerProvider: tp}, ListenerConfig{}, ProtocolH2)
	if resp := tracedGet(t, h, "/nowhere", "", ""); resp.StatusCode != 404 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	server, clients := spansOf(t, exp)
	if server.Name != "GET" || len(clients) != 0 {
		t.Errorf("name %q, %d client spans", server.Name, len(clients))
	}
	wantAttr(t, server, "error.type", "no_route")
	wantAttr(t, server, "http.response.status_code", int64(404))
	if server.Status.Code == codes.Error {
		t.Error("a 404 is the client's, not a server error")
	}
	exp.Reset()
	if resp := tracedGet(t, h, "/down", "", ""); resp.StatusCode != 502 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	server, clients = spansOf(t, exp)
	if len(clients) != 1 {
		t.Fatalf("%d client spans", len(clients))
	}
	wantAttr(t, server, "error.type", "backend_connect_failed")
	if server.Status.Code != codes.Error || clients[0].Status.Code != codes.Error {
		t.Errorf("statuses %v, %v; want errors", server.Status, clients[0].Status)
	}
	wantAttr(t, clients[0], "error.type", "backend_connect_failed")
}

// TestTracingApplySwitchesProvider: Apply switches the provider for new
// requests, and a nil one turns tracing off.
func TestTracingApplySwitchesProvider(t *testing.T) {
	tp1, exp1 := newTestTracing(t)
	tp2, exp2 := newTestTracing(t)
	be := &traceBackend{}
	ups := []UpstreamConfig{staticUpstream("web", "/", testbackend.NewH1(t, be))}
	h := startHarnessConfig(t, Config{Upstreams: ups, TracerProvider: tp1}, ListenerConfig{}, ProtocolH3)
	lcs := []ListenerConfig{{Name: "test", Address: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{h.cert.TLS}}}}
	tracedGet(t, h, "/", "", "")
	if err := h.gw.Apply(context.Background(), Config{Upstreams: ups, Listeners: lcs, TracerProvider: tp2}); err != nil {
		t.Fatal(err)
	}
	tracedGet(t, h, "/", "", "")
	if err := h.gw.Apply(context.Background(), Config{Upstreams: ups, Listeners: lcs}); err != nil {
		t.Fatal(err)
	}
	tracedGet(t, h, "/", "", "")
	if n1, n2 := len(exp1.GetSpans()), len(exp2.GetSpans()); n1 != 2 || n2 != 2 {
		t.Errorf("spans: %d to the first provider, %d to the second; want 2 and 2", n1, n2)
	}
	if parents, _ := be.seen(); parents[2] != "" {
		t.Errorf("tracing off still sent traceparent %q", parents[2])
	}
}

// BenchmarkHandlerTracing is BenchmarkHandler with tracing on, every
// request sampled: a server and a client span per request, exported at
// once to an in-memory exporter, emptied now and then (what the spans
// cost, without OTLP's encoding and network).
func BenchmarkHandlerTracing(b *testing.B) {
	exp := &resettingExporter{InMemoryExporter: tracetest.NewInMemoryExporter()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	b.Cleanup(func() { tp.Shutdown(context.Background()) }) // after the gateway's (benchGateway)
	benchHandlerConfig(b, Config{TracerProvider: tp}, false)
}

// resettingExporter keeps at most a few thousand spans in memory.
type resettingExporter struct {
	*tracetest.InMemoryExporter
	n atomic.Int64
}

func (e *resettingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.n.Add(int64(len(spans))) > 4096 {
		e.n.Store(0)
		e.Reset()
	}
	return e.InMemoryExporter.ExportSpans(ctx, spans)
}

// TestTracingWebSocket: a WebSocket's handshake is the tunnel's one try: a
// client span under the server span, and the backend gets its context.
func TestTracingWebSocket(t *testing.T) {
	tp, exp := newTestTracing(t)
	e := testbackend.NewWSEcho(t)
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{wsUpstream(e, nil)}, TracerProvider: tp}, ListenerConfig{}, ProtocolH1)
	resp := h1Upgrade(t, h, "/ws/echo", http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
		"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Traceparent": {sampledParent}})
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: status %d", resp.StatusCode)
	}
	waitServerSpan(t, exp) // the server span ends once the switch is recorded, after the 101 went out
	server, clients := spansOf(t, exp)
	if len(clients) != 1 || clients[0].Parent.SpanID() != server.SpanContext.SpanID() || server.Parent.SpanID().String() != clientSpanID {
		t.Fatalf("span tree: server parent %s, %d clients", server.Parent.SpanID(), len(clients))
	}
	wantAttr(t, clients[0], "http.response.status_code", int64(101))
	wantAttr(t, server, "http.response.status_code", int64(101))
	if got, want := e.Header("Traceparent"), "00-"+clientTraceID+"-"+clients[0].SpanContext.SpanID().String()+"-01"; got != want {
		t.Errorf("backend traceparent %q, want %q", got, want)
	}
}

// TestTracingWebSocketRetry: a handshake retried after a connect failure
// has a client span per try: the refused one with its reason, then the
// one that switched.
func TestTracingWebSocketRetry(t *testing.T) {
	tp, exp := newTestTracing(t)
	e := testbackend.NewWSEcho(t)
	uc := wsUpstream(e, nil)
	uc.Static = append([]upstream.Spec{closedPort(t, "dead", "http")}, uc.Static...)
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{uc}, TracerProvider: tp}, ListenerConfig{}, ProtocolH1)
	for i := 0; i < 4 && len(exp.GetSpans()) < 3; i++ { // round robin: one of the first two goes to the dead backend first
		exp.Reset()
		resp := h1Upgrade(t, h, "/ws/echo", http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
			"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}})
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade %d: status %d", i, resp.StatusCode)
		}
		waitServerSpan(t, exp)
	}
	server, clients := spansOf(t, exp)
	if len(clients) != 2 {
		t.Fatalf("%d client spans, want 2 (a refused try and a retry)", len(clients))
	}
	wantAttr(t, clients[0], "impulse.backend", "dead")
	wantAttr(t, clients[0], "error.type", "backend_connect_failed")
	wantAttr(t, clients[1], "impulse.attempt", int64(2))
	wantAttr(t, clients[1], "http.response.status_code", int64(101))
	wantAttr(t, server, "impulse.attempts", int64(2))
}

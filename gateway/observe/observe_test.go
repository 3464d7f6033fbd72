package observe

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testUpstream is an upstream with one static backend, never dialled.
func testUpstream(t testing.TB) (*upstream.Upstream, *upstream.Backend) {
	u, err := upstream.New(upstream.Config{Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(u.Close)
	if err := u.SetStatic([]upstream.Spec{{ID: "a", Scheme: "http", Host: "127.0.0.1", Port: 1, Weight: 1}}); err != nil {
		t.Fatal(err)
	}
	return u, u.Current().Backends[0]
}

func testObservers(t testing.TB, access *accesslog.Config) *Observers {
	gm := NewMetrics(nil)
	obs := &Observers{Metrics: gm, Access: NewAccessLog(hclog.NewNullLogger(), gm), Tracing: new(Tracing), Traffic: new(Traffic),
		Log: hclog.NewNullLogger()}
	if err := obs.Access.Start(access); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { obs.Access.Close(time.Second) })
	obs.Traffic.Keep([]string{"web"})
	return obs
}

// TestRecordFeedsEveryObserver: one Outcome reaches the request metrics,
// the gRPC metrics, the status page's counters (the relayed try on the
// request's status, a hidden failed try on its own) and the access log.
func TestRecordFeedsEveryObserver(t *testing.T) {
	var lines syncBuffer
	obs := testObservers(t, &accesslog.Config{Writer: &lines})
	up, b := testUpstream(t)
	o := &Outcome{Start: time.Now(), Listener: "l", Protocol: "h2", Method: "GET", Host: "h", Path: "/p",
		Upstream: up, Backend: b, Status: 200, GRPCStatus: "OK"}
	b.Acquire()
	obs.Attempted(o, Attempt{Backend: b, Verdict: health.Failure, Reason: "backend_reset", Status: 502})
	b.Acquire()
	obs.Attempted(o, Attempt{Backend: b, Verdict: health.Success, Status: 200, Answered: true, Final: true})
	obs.Record(o)
	if n := obs.Metrics.Requests(func(l RequestLabels) bool { return l == RequestLabels{"l", "h2", "web", "2xx", ""} }); n != 1 {
		t.Errorf("impulse_requests %d", n)
	}
	if n := obs.Metrics.GRPCRequests("l", "h2", "web", "2xx", "OK"); n != 1 {
		t.Errorf("impulse_grpc_requests %d", n)
	}
	if c := b.Responses().Load(); c.Success != 1 || c.ServerError != 1 || c.Errors != 1 {
		t.Errorf("backend counts %+v", c)
	}
	if c := obs.Traffic.Load()["web"]; c.Success != 1 || c.ServerError != 0 {
		t.Errorf("upstream counts %+v", c)
	}
	if b.InFlight() != 0 {
		t.Errorf("in flight %d after both attempts", b.InFlight())
	}
	obs.Access.Close(time.Second)
	if got := lines.String(); !contains(got, `"status":200`) || !contains(got, `"attempts":2`) {
		t.Errorf("access log: %s", got)
	}
}

// TestRecordNoAlloc: recording an Outcome allocates nothing once its
// series exist (metrics, counters, the access log's channel send).
func TestRecordNoAlloc(t *testing.T) {
	obs := testObservers(t, &accesslog.Config{Writer: io.Discard})
	up, b := testUpstream(t)
	o := &Outcome{Start: time.Now(), Listener: "l", Protocol: "h3", Upstream: up, Backend: b, Status: 503, Reason: "connect_failed"}
	obs.Record(o)
	if n := testing.AllocsPerRun(100, func() { obs.Record(o) }); n != 0 {
		t.Errorf("Record allocates %v times", n)
	}
}

// BenchmarkAccessLogEntry measures what the access log adds to a request:
// building its entry from the Outcome and handing it to the writer (a
// channel send, or a drop when the writer is behind). No allocation.
func BenchmarkAccessLogEntry(b *testing.B) {
	obs := testObservers(b, &accesslog.Config{Writer: io.Discard})
	up, be := testUpstream(b)
	o := &Outcome{Start: time.Now(), Listener: "bench", Protocol: "h3", Proto: "HTTP/3.0", Method: "GET", Host: "example.com",
		Path: "/small", Query: "x=1", ClientAddress: "127.0.0.1:40000", SNI: "example.com",
		RequestID: "4bf92f3577b34da6a3ce929d0e0e4736", Upstream: up, Backend: be, Status: 200, BytesOut: 64}
	b.ReportAllocs()
	for b.Loop() {
		obs.Access.record(o)
	}
}

// TestTracingTraceID: the server span carries the request's trace ID (the
// client's trace when it sent one) for the access log; no span, and "",
// when tracing is off.
func TestTracingTraceID(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	defer tp.Shutdown(context.Background())
	var tg Tracing
	tg.SetProvider(tp)
	r := httptest.NewRequest(http.MethodGet, "https://example.com/", nil)
	r.TLS = &tls.ConnectionState{}
	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	r.Header.Set("Traceparent", "00-"+trace+"-00f067aa0ba902b7-00")
	if id := tg.StartServer(r, time.Now(), "id", "l").TraceID(); id != trace {
		t.Errorf("trace ID %q, want %q", id, trace)
	}
	tg.SetProvider(nil)
	if s := tg.StartServer(r, time.Now(), "id", "l"); s != nil || s.TraceID() != "" {
		t.Errorf("tracing off: span %v", s)
	}
}

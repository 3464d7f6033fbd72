package agent

import (
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// A client traceparent (the W3C trace-context example).
const (
	parentTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentSampled = "00-" + parentTraceID + "-00f067aa0ba902b7-01"
)

// gotSpan is one span an otlpReceiver decoded.
type gotSpan struct {
	service, name     string
	kind              tracepb.Span_SpanKind
	trace, id, parent string
}

// otlpReceiver is a minimal OTLP/HTTP (protobuf) trace receiver on
// loopback: it decodes what the exporter sends and keeps the spans.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []gotSpan
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	rc := &otlpReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		for _, rs := range req.ResourceSpans {
			service := ""
			for _, kv := range rs.Resource.GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					rc.spans = append(rc.spans, gotSpan{service: service, name: s.Name, kind: s.Kind,
						trace: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId)})
				}
			}
		}
		rc.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *otlpReceiver) endpoint() string { return rc.srv.Listener.Addr().String() }

// trace returns the spans received of trace id.
func (rc *otlpReceiver) trace(id string) []gotSpan {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []gotSpan
	for _, s := range rc.spans {
		if s.trace == id {
			out = append(out, s)
		}
	}
	return out
}

func (rc *otlpReceiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.spans)
}

// parentBackend answers 200 with the traceparent it got as its body.
func parentBackend(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("Traceparent"))
	}))
	t.Cleanup(s.Close)
	return s
}

// getTraced GETs u with a traceparent ("" = none) and returns the status
// and body.
func (r *running) getTraced(t *testing.T, u, traceparent string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	if traceparent != "" {
		req.Header.Set("Traceparent", traceparent)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFor polls cond every 10 ms until it holds, failing after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fastExport makes the batch span processor export every 20 ms.
func fastExport(t *testing.T) { t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") }

func tracedConfig(tracingBlock, backendURL string) string {
	return baseConfig + tracingBlock + fmt.Sprintf(`
upstream "web" {
  route {}
  backend "a" {
    address = %q
  }
}
`, backendURL)
}

// reload rewrites the configuration (certificate placeholders filled) and
// reloads it through the control API.
func (r *running) reload(t *testing.T, config string) {
	t.Helper()
	cert, key := filepath.Join(r.dir, "cert.pem"), filepath.Join(r.dir, "key.pem")
	if err := os.WriteFile(r.cfg, []byte(fmt.Sprintf(config, cert, key)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, body := r.control("POST", "/v1/reload", ""); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
}

// TestTracingExportAndReload: spans reach the OTLP/HTTP endpoint with the
// configured service name, as a tree under the client's traceparent; a
// reload with the same block keeps the provider, one with another endpoint
// switches to it (the old one is shut down), and one without the block
// turns tracing off: the client's traceparent then reaches the backend
// unchanged.
func TestTracingExportAndReload(t *testing.T) {
	fastExport(t)
	first, second := newOTLPReceiver(t), newOTLPReceiver(t)
	be := parentBackend(t)
	block := func(endpoint string) string {
		return fmt.Sprintf("tracing {\n  otlp_endpoint = %q\n  protocol = \"http\"\n  service_name = \"edge-test\"\n}\n", endpoint)
	}
	r := start(t, tracedConfig(block(first.endpoint()), be.URL))
	code, got := r.getTraced(t, r.url("main", "/x"), parentSampled)
	if code != 200 || !strings.HasPrefix(got, "00-"+parentTraceID+"-") || got == parentSampled {
		t.Fatalf("%d; backend traceparent %q: want the client's trace with the gateway's span", code, got)
	}
	waitFor(t, 5*time.Second, "two spans of the trace", func() bool { return len(first.trace(parentTraceID)) == 2 })
	spans := first.trace(parentTraceID)
	var server, client gotSpan
	for _, s := range spans {
		if s.service != "edge-test" {
			t.Errorf("service.name %q", s.service)
		}
		switch s.kind {
		case tracepb.Span_SPAN_KIND_SERVER:
			server = s
		case tracepb.Span_SPAN_KIND_CLIENT:
			client = s
		}
	}
	if server.parent != "00f067aa0ba902b7" || client.parent != server.id || server.name != "GET /" {
		t.Errorf("span tree: server %+v, client %+v", server, client)
	}
	if got != "00-"+parentTraceID+"-"+client.id+"-01" {
		t.Errorf("backend traceparent %q, want the client span %s", got, client.id)
	}

	r.a.mu.Lock()
	before := r.a.tracing
	r.a.mu.Unlock()
	r.reload(t, tracedConfig(block(first.endpoint()), be.URL))
	r.a.mu.Lock()
	kept := r.a.tracing == before
	r.a.mu.Unlock()
	if !kept {
		t.Error("a reload with the same tracing block replaced the provider")
	}

	r.reload(t, tracedConfig(block(second.endpoint()), be.URL))
	_, got = r.getTraced(t, r.url("main", "/y"), "")
	newTrace := strings.Split(got, "-")[1]
	waitFor(t, 5*time.Second, "the spans at the new endpoint", func() bool { return len(second.trace(newTrace)) == 2 })
	if n := len(first.trace(newTrace)); n != 0 {
		t.Errorf("the old endpoint got %d spans after the reload", n)
	}

	r.reload(t, tracedConfig("", be.URL))
	if _, got := r.getTraced(t, r.url("main", "/z"), parentSampled); got != parentSampled {
		t.Errorf("tracing off: backend traceparent %q, want the client's %q", got, parentSampled)
	}
	if !strings.Contains(r.logs.String(), "tracing off") {
		t.Error("no log line says tracing went off")
	}
}

// TestTracingSampleRatio: sample_ratio = 0 records no new trace, but a
// sampled parent is honoured (ParentBased).
func TestTracingSampleRatio(t *testing.T) {
	fastExport(t)
	rc := newOTLPReceiver(t)
	be := parentBackend(t)
	r := start(t, tracedConfig(fmt.Sprintf("tracing {\n  otlp_endpoint = %q\n  protocol = \"http\"\n  sample_ratio = 0\n}\n", rc.endpoint()), be.URL))
	_, unsampled := r.getTraced(t, r.url("main", "/"), "")
	if !strings.HasSuffix(unsampled, "-00") {
		t.Errorf("a new trace at ratio 0 went out as %q, want the sampled flag off", unsampled)
	}
	r.getTraced(t, r.url("main", "/"), parentSampled)
	waitFor(t, 5*time.Second, "the sampled parent's spans", func() bool { return len(rc.trace(parentTraceID)) == 2 })
	if n := len(rc.trace(strings.Split(unsampled, "-")[1])); n != 0 {
		t.Errorf("%d spans of a trace sample_ratio 0 did not sample", n)
	}
	if s := rc.trace(parentTraceID); s[0].service != "impulse-agent" {
		t.Errorf("default service.name %q", s[0].service)
	}
}

// TestTracingCollectorDown: with the collector's port closed, over both
// protocols, many requests succeed without waiting for the exporter (an
// export takes up to 1.5 s to fail, and the queue is small enough to fill
// many times over), goroutines do not pile up, and the log has one export
// error line while several exports failed (at most one per minute).
func TestTracingCollectorDown(t *testing.T) {
	for _, protocol := range []string{"grpc", "http"} {
		t.Run(protocol, func(t *testing.T) {
			t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
			t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "64")
			t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")
			t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1500") // ms: an export may retry this long before it fails
			saved := tracingShutdownTimeout
			t.Cleanup(func() { tracingShutdownTimeout = saved }) // after the agent's stop (cleanups run last first)
			tracingShutdownTimeout = 100 * time.Millisecond      // the stop drops the queue instead of draining it for seconds
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			down := ln.Addr().String()
			ln.Close() // connection refused from now on
			be := backend(t, "ok")
			r := start(t, tracedConfig(fmt.Sprintf("tracing {\n  otlp_endpoint = %q\n  protocol = %q\n}\n", down, protocol), be.URL))
			r.get(t, r.url("main", "/")) // connections up before counting goroutines
			goroutines := runtime.NumGoroutine()
			r.a.mu.Lock()
			errs := r.a.tracing.errs
			r.a.mu.Unlock()
			var slowest, total time.Duration
			n := 0
			deadline := time.Now().Add(20 * time.Second)
			for ; n < 300 || errs.held() < 1; n++ { // failed exports after the first line
				if time.Now().After(deadline) {
					t.Fatalf("after %d requests: %d export failures held back", n, errs.held())
				}
				t0 := time.Now()
				if code, body := r.get(t, r.url("main", "/")); code != 200 || body != "ok" {
					t.Fatalf("request %d: %d %q", n, code, body)
				}
				took := time.Since(t0)
				slowest, total = max(slowest, took), total+took
			}
			t.Logf("%d requests, %v on average, slowest %v; %d export failures held back", n, total/time.Duration(n), slowest, errs.held())
			// A request that waited for the exporter would take about an
			// export timeout, and once the queue is full nearly all would.
			if slowest > time.Second || total/time.Duration(n) > 50*time.Millisecond {
				t.Errorf("%d requests: slowest %v, average %v: requests waited for the exporter", n, slowest, total/time.Duration(n))
			}
			if g := runtime.NumGoroutine(); g > goroutines+20 {
				t.Errorf("goroutines grew from %d to %d", goroutines, g)
			}
			if lines := strings.Count(r.logs.String(), "exporting spans failed"); lines != 1 {
				t.Errorf("%d export error lines, want 1 (at most one a minute)\n%s", lines, r.logs)
			}
		})
	}
}

// held is how many lines l has held back since its last one.
func (l *rateLog) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.suppressed
}

// TestRateLog: one line per interval; the next one counts those held back.
func TestRateLog(t *testing.T) {
	var out syncBuffer
	now := time.Unix(1000, 0)
	l := newRateLog(hclog.New(&hclog.LoggerOptions{Output: &out}), time.Minute)
	l.now = func() time.Time { return now }
	l.error("export failed", "n", 1)
	now = now.Add(30 * time.Second)
	l.error("export failed", "n", 2)
	l.error("export failed", "n", 3)
	now = now.Add(31 * time.Second)
	l.error("export failed", "n", 4)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "n=1") || !strings.Contains(lines[1], "n=4") || !strings.Contains(lines[1], "suppressed=2") {
		t.Errorf("lines:\n%s", out.String())
	}
}

// TestTracingOnLogsEndpointAsWritten: the "tracing on" line names
// otlp_endpoint as configured, scheme and path included, not only its
// host:port.
func TestTracingOnLogsEndpointAsWritten(t *testing.T) {
	r := start(t, baseConfig+"tracing {\n  otlp_endpoint = \"http://127.0.0.1:1/otlp/wrong\"\n  protocol      = \"http\"\n}\n")
	if !strings.Contains(r.logs.String(), "tracing on: otlp_endpoint=http://127.0.0.1:1/otlp/wrong protocol=http") {
		t.Errorf("no \"tracing on\" line with the endpoint as written:\n%s", r.logs)
	}
}

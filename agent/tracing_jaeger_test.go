package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testtool"
)

// The tracing test against a real Jaeger: v1.76.0's all-in-one `jaeger`
// binary (the OpenTelemetry Collector based v2), built once and cached by
// scripts/jaeger.sh (`make test` exports JAEGER_BIN). It runs on loopback
// with memory storage, its OTLP gRPC receiver and its query HTTP API on
// free ports.

// jaegerBinary is $JAEGER_BIN (`make test` sets it), or else the binary
// scripts/jaeger.sh builds once (about 10 minutes on 2 cores) and caches,
// as test/consultest does for Consul. When neither gives one the test
// fails in CI and is skipped elsewhere (testtool.Built).
func jaegerBinary(t *testing.T) string {
	t.Helper()
	return testtool.Built(t, "JAEGER_BIN", "jaeger.sh")
}

// freeLoopbackPorts returns n TCP ports that were free on 127.0.0.1 (a
// process started next binds them).
func freeLoopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return ports
}

// jaegerConfig is the collector configuration: OTLP receivers, memory
// storage, the query API; no metrics endpoint (it would take a fixed port).
const jaegerConfig = `
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 1000
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%[3]d
    grpc:
      endpoint: 127.0.0.1:%[4]d
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%[1]d
      http:
        endpoint: 127.0.0.1:%[2]d
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// jaeger is a running Jaeger all-in-one.
type jaeger struct {
	otlpGRPC string // host:port of the OTLP/gRPC receiver
	query    string // base URL of the query HTTP API
}

// startJaeger runs Jaeger until the test ends and waits until its query
// API answers and its OTLP receiver accepts connections.
func startJaeger(t *testing.T) *jaeger {
	bin := jaegerBinary(t)
	dir := t.TempDir()
	p := freeLoopbackPorts(t, 4)
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(jaegerConfig, p[0], p[1], p[2], p[3])), 0o600); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "jaeger.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", "file:"+cfg)
	cmd.Stdout, cmd.Stderr = logFile, logFile // files: no copying goroutines
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logFile.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logFile.Name())
			t.Logf("jaeger log:\n%s", out)
		}
	})
	j := &jaeger{otlpGRPC: fmt.Sprintf("127.0.0.1:%d", p[0]), query: fmt.Sprintf("http://127.0.0.1:%d", p[2])}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			out, _ := os.ReadFile(logFile.Name())
			t.Fatalf("jaeger exited: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("jaeger did not become ready within 60s")
		}
		if resp, err := http.Get(j.query + "/api/services"); err == nil {
			resp.Body.Close()
			if c, err := net.DialTimeout("tcp", j.otlpGRPC, time.Second); resp.StatusCode == 200 && err == nil {
				c.Close()
				return j
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// jaegerSpan is a span as Jaeger's query API (/api/traces/{id}) shows it.
type jaegerSpan struct {
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

func (s jaegerSpan) tag(k string) any {
	for _, t := range s.Tags {
		if t.Key == k {
			return t.Value
		}
	}
	return nil
}

func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// trace fetches trace id: its spans and the service name of each process
// (nil when Jaeger has no such trace yet).
func (j *jaeger) trace(t *testing.T, id string) ([]jaegerSpan, map[string]string) {
	t.Helper()
	resp, err := http.Get(j.query + "/api/traces/" + id)
	if err != nil {
		t.Fatalf("jaeger query: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	var out struct {
		Data []struct {
			Spans     []jaegerSpan `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("jaeger query %s: %d %v", id, resp.StatusCode, err)
	}
	if len(out.Data) == 0 {
		return nil, nil
	}
	services := map[string]string{}
	for pid, p := range out.Data[0].Processes {
		services[pid] = p.ServiceName
	}
	return out.Data[0].Spans, services
}

// waitTrace polls Jaeger until trace id has n spans.
func (j *jaeger) waitTrace(t *testing.T, id string, n int) ([]jaegerSpan, map[string]string) {
	t.Helper()
	var spans []jaegerSpan
	var services map[string]string
	waitFor(t, 20*time.Second, fmt.Sprintf("%d spans of trace %s in Jaeger", n, id), func() bool {
		spans, services = j.trace(t, id)
		return len(spans) >= n
	})
	if len(spans) != n {
		t.Fatalf("trace %s has %d spans, want %d", id, len(spans), n)
	}
	return spans, services
}

// split returns the server span and the client spans by attempt.
func splitJaeger(t *testing.T, spans []jaegerSpan) (server jaegerSpan, clients map[float64]jaegerSpan) {
	t.Helper()
	clients = map[float64]jaegerSpan{}
	for _, s := range spans {
		switch s.tag("span.kind") {
		case "server":
			server = s
		case "client":
			n, _ := s.tag("impulse.attempt").(float64)
			clients[n] = s
		default:
			t.Errorf("span %q has span.kind %v", s.OperationName, s.tag("span.kind"))
		}
	}
	return server, clients
}

// TestTracingJaeger: the gateway's spans as a real Jaeger shows them. A
// request under a sampled client traceparent is a server span whose
// parent is the client's span, with the semantic-convention attributes,
// and a client span under it; one without traceparent starts its own
// trace; a not-sampled parent leaves no trace; a retried request has two
// client spans under one server span, the first with the 503 it got.
func TestTracingJaeger(t *testing.T) {
	j := startJaeger(t)
	fastExport(t)
	var hits atomic.Int64
	flaky := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(r.Header.Get("Traceparent")))
	})
	f1, f2 := httptest.NewServer(flaky), httptest.NewServer(flaky)
	defer f1.Close()
	defer f2.Close()
	be := parentBackend(t)
	r := start(t, baseConfig+fmt.Sprintf(`
tracing {
  otlp_endpoint = %q
  service_name  = "impulse-jaeger-test"
}
upstream "web" {
  route {
    path_prefix = "/api"
  }
  backend "a" {
    address = %q
  }
}
upstream "flaky" {
  route {
    path_prefix = "/flaky"
  }
  retry {
    attempts = 2
    on       = ["503"]
  }
  backend "f1" {
    address = %q
  }
  backend "f2" {
    address = %q
  }
}
`, j.otlpGRPC, be.URL, f1.URL, f2.URL))

	// A sampled client parent.
	code, got := r.getTraced(t, r.url("main", "/api/users"), parentSampled)
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	spans, services := j.waitTrace(t, parentTraceID, 2)
	server, clients := splitJaeger(t, spans)
	client := clients[1]
	if server.parent() != "00f067aa0ba902b7" || client.parent() != server.SpanID || len(clients) != 1 {
		t.Errorf("span tree: server %s (parent %s), clients %v", server.SpanID, server.parent(), clients)
	}
	if server.OperationName != "GET /api" || client.OperationName != "GET" {
		t.Errorf("operations %q, %q", server.OperationName, client.OperationName)
	}
	if services[server.ProcessID] != "impulse-jaeger-test" {
		t.Errorf("service %q", services[server.ProcessID])
	}
	for k, want := range map[string]any{"http.request.method": "GET", "http.route": "/api", "http.response.status_code": float64(200),
		"network.protocol.version": "3", "server.address": "127.0.0.1", "url.path": "/api/users", "impulse.upstream": "web"} {
		if v := server.tag(k); v != want {
			t.Errorf("server span %s = %v (%T), want %v", k, v, v, want)
		}
	}
	if id, _ := server.tag("impulse.request_id").(string); len(id) != 32 {
		t.Errorf("impulse.request_id %v", server.tag("impulse.request_id"))
	}
	if client.tag("server.address") != "127.0.0.1" || client.tag("http.response.status_code") != float64(200) {
		t.Errorf("client span tags %v", client.Tags)
	}
	if got != "00-"+parentTraceID+"-"+client.SpanID+"-01" {
		t.Errorf("backend traceparent %q: want its client span %s as parent", got, client.SpanID)
	}

	// No client traceparent: a new trace, the server span its root.
	_, got = r.getTraced(t, r.url("main", "/api/new"), "")
	fresh := strings.Split(got, "-")[1]
	spans, _ = j.waitTrace(t, fresh, 2)
	if server, _ := splitJaeger(t, spans); server.parent() != "" {
		t.Errorf("a new trace's server span has parent %s", server.parent())
	}

	// A not-sampled parent, then a retried request: once the retried one is
	// in Jaeger, the earlier one would be too if it had been recorded.
	const unsampledTrace = "0af7651916cd43dd8448eb211c80319c"
	if code, _ := r.getTraced(t, r.url("main", "/api/quiet"), "00-"+unsampledTrace+"-b7ad6b7169203331-00"); code != 200 {
		t.Fatalf("status %d", code)
	}
	code, got = r.getTraced(t, r.url("main", "/flaky"), "")
	if code != 200 {
		t.Fatalf("retried request: %d", code)
	}
	retried := strings.Split(got, "-")[1]
	spans, _ = j.waitTrace(t, retried, 3)
	server, clients = splitJaeger(t, spans)
	if len(clients) != 2 || clients[1].parent() != server.SpanID || clients[2].parent() != server.SpanID {
		t.Fatalf("retry: clients %v under server %s", clients, server.SpanID)
	}
	if clients[1].tag("http.response.status_code") != float64(503) || clients[1].tag("error.type") != "503" || clients[1].tag("error") != true {
		t.Errorf("first try tags %v", clients[1].Tags)
	}
	if clients[2].tag("http.response.status_code") != float64(200) || clients[2].tag("http.request.resend_count") != float64(1) {
		t.Errorf("second try tags %v", clients[2].Tags)
	}
	if server.tag("impulse.attempts") != float64(2) || server.tag("http.response.status_code") != float64(200) {
		t.Errorf("retried server span tags %v", server.Tags)
	}
	if spans, _ := j.trace(t, unsampledTrace); spans != nil {
		t.Errorf("a not-sampled parent's trace is in Jaeger: %d spans", len(spans))
	}
}

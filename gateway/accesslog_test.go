package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/hashicorp/go-metrics"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/certs"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/impulse-agent/impulse-agent/internal/testpki"
)

// logSink is an access log destination a test reads while the gateway
// writes.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines parses the JSON lines written so far, failing the test on one
// that does not parse.
func (s *logSink) lines(t *testing.T) []map[string]any {
	t.Helper()
	return parseLines(t, s.String())
}

func parseLines(t *testing.T, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("access log line is not JSON: %q", sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// wait returns the lines once there are n.
func (s *logSink) wait(t *testing.T, n int) []map[string]any {
	t.Helper()
	var lines []map[string]any
	eventually(t, 10*time.Second, func() bool { lines = s.lines(t); return len(lines) >= n }, "access log lines")
	if len(lines) != n {
		t.Fatalf("%d access log lines, want %d:\n%s", len(lines), n, s.String())
	}
	return lines
}

// loggedHarness is a harness whose gateway logs to a logSink (or where
// alc says) with alc's settings and reports metrics to m (nil: none).
func loggedHarness(t *testing.T, proto string, alc accesslog.Config, m *metrics.Metrics, ups ...UpstreamConfig) (*harness, *logSink) {
	t.Helper()
	sink := &logSink{}
	if alc.Writer == nil && alc.Path == "" {
		alc.Writer = sink
	}
	return startHarnessConfig(t, Config{Upstreams: ups, AccessLog: &alc, Metrics: m}, ListenerConfig{}, proto), sink
}

// inmemMetrics is a go-metrics registry with an in-memory sink.
func inmemMetrics() (*metrics.Metrics, *metrics.InmemSink) {
	sink := metrics.NewInmemSink(time.Hour, time.Hour)
	cfg := metrics.DefaultConfig("impulse")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics = false, false
	m, _ := metrics.New(cfg, sink)
	return m, sink
}

// counterSum is the total of counter name over every label set that has
// the labels in match.
func counterSum(g *Gateway, sink *metrics.InmemSink, name string, match map[string]string) float64 {
	g.FlushMetrics()
	var sum float64
	for _, iv := range sink.Data() {
		for _, c := range iv.Counters {
			if c.Name != name {
				continue
			}
			ok := true
			for k, v := range match {
				found := false
				for _, l := range c.Labels {
					found = found || (l.Name == k && l.Value == v)
				}
				ok = ok && found
			}
			if ok {
				sum += c.Sum
			}
		}
	}
	return sum
}

// checkFields fails the test for each field of line that differs from
// want (numbers as JSON decodes them, float64; nil: absent).
func checkFields(t *testing.T, line map[string]any, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got, ok := line[k]
		switch {
		case v == nil && ok:
			t.Errorf("%s = %v, want absent", k, got)
		case v != nil && got != v:
			t.Errorf("%s = %#v, want %#v", k, got, v)
		}
	}
}

var timeField = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

// TestAccessLogFields: a proxied request's line has every field, its body
// bytes each way and the backend; a gateway 404 has its reason and no
// backend. Over each ingress.
func TestAccessLogFields(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		backend := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "hello world")
		}))
		h, sink := loggedHarness(t, proto, accesslog.Config{}, nil, staticUpstream("web", "/api", backend))
		before := time.Now().UTC().Truncate(time.Millisecond)
		req, _ := http.NewRequest("POST", h.base+"/api/items?token=secret", strings.NewReader("12345"))
		req.Header.Set("User-Agent", "impulse-test/1")
		req.Header.Set("X-Request-Id", "req-1")
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resp = h.get("/nowhere")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		after := time.Now()

		lines := sink.wait(t, 2)
		ok, notFound := lines[0], lines[1]
		checkFields(t, ok, map[string]any{
			"request_id": "req-1", "trace_id": "", "listener": "test", "protocol": proto, "tls_sni": "localhost",
			"client_cert_subject": nil, "method": "POST", "host": strings.TrimPrefix(h.base, "https://"), "path": "/api/items",
			"query": nil, "status": 200.0, "reason": "", "bytes_in": 5.0, "bytes_out": 11.0, "upstream": "web", "backend": "0",
			"attempts": 1.0, "user_agent": "impulse-test/1", "grpc_status": nil,
		})
		ts, _ := ok["time"].(string)
		at, err := time.Parse(time.RFC3339Nano, ts)
		if !timeField.MatchString(ts) || err != nil || at.Before(before) || at.After(after) {
			t.Errorf("time %q: want RFC 3339 in UTC with ms, between %v and %v", ts, before, after)
		}
		if host, _, err := net.SplitHostPort(ok["client_address"].(string)); err != nil || host != "127.0.0.1" {
			t.Errorf("client_address %v", ok["client_address"])
		}
		if d, _ := ok["duration_ms"].(float64); d <= 0 || d > float64(after.Sub(before).Milliseconds()+1) {
			t.Errorf("duration_ms %v", ok["duration_ms"])
		}
		checkFields(t, notFound, map[string]any{
			"method": "GET", "path": "/nowhere", "status": 404.0, "reason": "no_route", "upstream": "", "backend": "",
			"attempts": 0.0, "bytes_in": 0.0, "bytes_out": float64(len("Not Found: no_route\n")), "protocol": proto,
		})
		if id, _ := notFound["request_id"].(string); len(id) != 32 {
			t.Errorf("a generated request_id %q", id)
		}
	})
}

// TestAccessLogQueryAndCombined: the query is logged only with
// include_query; the combined format is Apache's.
func TestAccessLogQueryAndCombined(t *testing.T) {
	backend := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	h, sink := loggedHarness(t, ProtocolH2, accesslog.Config{IncludeQuery: true}, nil, staticUpstream("web", "/", backend))
	resp := h.get("/q?token=secret&x=1")
	resp.Body.Close()
	checkFields(t, sink.wait(t, 1)[0], map[string]any{"path": "/q", "query": "token=secret&x=1"})

	h, sink = loggedHarness(t, ProtocolH1, accesslog.Config{Format: accesslog.FormatCombined}, nil, staticUpstream("web", "/", backend))
	req, _ := http.NewRequest("GET", h.base+"/c?token=secret", nil)
	req.Header.Set("User-Agent", "ua/1")
	req.Header.Set("Referer", "https://example.com/")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	re := regexp.MustCompile(`^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000\] "GET /c HTTP/1\.1" 200 2 "https://example\.com/" "ua/1"\n$`)
	eventually(t, 10*time.Second, func() bool { return sink.String() != "" }, "the line")
	if !re.MatchString(sink.String()) {
		t.Errorf("combined line %q", sink.String())
	}
}

// TestB26AccessLogAndMetricAgree is case B26 seen by the access log:
// every backend unhealthy, the client, the access log line and the request
// metric all say 503 no_healthy_backend. Over each ingress.
func TestB26AccessLogAndMetricAgree(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		a := testbackend.NewFlappy(t, "a")
		a.Healthy.Store(false)
		uc := staticUpstream("web", "/", a.Server)
		uc.Active = &health.ActiveConfig{Path: "/health", Interval: 20 * time.Millisecond, Timeout: time.Second,
			HealthyThreshold: 1, UnhealthyThreshold: 1}
		m, msink := inmemMetrics()
		h, sink := loggedHarness(t, proto, accesslog.Config{}, m, uc)
		eventually(t, 5*time.Second, func() bool { return !h.gw.Backends()[0].Eligible }, "the backend unhealthy")
		resp := h.get("/")
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("X-Impulse-Error") != "no_healthy_backend" {
			t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
		}
		checkFields(t, sink.wait(t, 1)[0], map[string]any{"status": 503.0, "reason": "no_healthy_backend", "upstream": "web", "backend": "", "attempts": 0.0})
		if n := counterSum(h.gw, msink, "impulse.requests", map[string]string{"code": "5xx", "reason": "no_healthy_backend", "protocol": proto}); n != 1 {
			t.Errorf("impulse_requests{code=5xx,reason=no_healthy_backend} = %v, want 1", n)
		}
	})
}

// TestAccessLogClientCertificate: the subject of a client certificate the
// handshake verified is logged; none without one, nor for one a listener
// never asked for (and so never verified). Over each ingress.
func TestAccessLogClientCertificate(t *testing.T) {
	serverCA, clientCA := testpki.NewCA(t, "server CA"), testpki.NewCA(t, "client CA")
	serverCert := serverCA.Issue(t, testpki.Leaf{CN: "gateway", DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	valid := clientCA.Issue(t, testpki.Leaf{CN: "web-client", Client: true})
	backend := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	listen := func(mode certs.ClientAuth) (string, *logSink) {
		sink := &logSink{}
		g, err := New(Config{Upstreams: []UpstreamConfig{staticUpstream("u", "/", backend)}, AccessLog: &accesslog.Config{Writer: sink}})
		if err != nil {
			t.Fatal(err)
		}
		lc := listenerFor(t, certs.Config{Default: serverCert, ClientAuth: mode, ClientCAs: clientCA.Pool}, false)
		lc.Name, lc.Address = "tls", "127.0.0.1:0"
		if err := g.Start(context.Background(), []ListenerConfig{lc}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			g.Shutdown(ctx)
		})
		return g.Addrs()["tls"].String(), sink
	}
	for _, p := range tlsProtos {
		t.Run(p.name, func(t *testing.T) {
			for _, tc := range []struct {
				mode    certs.ClientAuth
				cert    *tls.Certificate
				subject any
			}{
				{certs.ClientAuthRequire, &valid, "CN=web-client,O=impulse tests"},
				{certs.ClientAuthRequest, nil, nil},
				{certs.ClientAuthNone, &valid, nil},
			} {
				addr, sink := listen(tc.mode)
				conf := &tls.Config{RootCAs: serverCA.Pool, ServerName: "localhost"}
				if tc.cert != nil {
					conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return tc.cert, nil }
				}
				if _, _, err := p.get(t, addr, conf, nil); err != nil {
					t.Fatal(err)
				}
				checkFields(t, sink.wait(t, 1)[0], map[string]any{"client_cert_subject": tc.subject, "status": 200.0, "listener": "tls"})
			}
		})
	}
}

// TestAccessLogGRPCStatus: a gRPC call's line carries its gRPC status.
func TestAccessLogGRPCStatus(t *testing.T) {
	uc, _ := grpcBackendWith(t, "h2c")
	uc.Routes = []RouteConfig{{PathPrefix: "/pkg.Svc/"}}
	h, sink := loggedHarness(t, ProtocolH3, accesslog.Config{}, nil, uc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, out := []byte("x"), []byte(nil)
	if err := grpcConn(t, h).Invoke(ctx, "/pkg.Svc/Unary", &in, &out); err != nil {
		t.Fatal(err)
	}
	checkFields(t, sink.wait(t, 1)[0], map[string]any{"grpc_status": "OK", "status": 200.0, "protocol": "h2", "path": "/pkg.Svc/Unary"})
}

// TestAccessLogTunnelAtItsEnd: a WebSocket tunnel is logged once, when it
// closes, with the bytes relayed each way and its whole duration. Over
// each ingress.
func TestAccessLogTunnelAtItsEnd(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		e := testbackend.NewWSEcho(t)
		h, sink := loggedHarness(t, proto, accesslog.Config{}, nil, wsUpstream(e, nil))
		c, err := dialWS(t, h, "/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		if err := c.send(ws.OpText, []byte("hello through the tunnel")); err != nil {
			t.Fatal(err)
		}
		if msg, _, err := c.recv(); err != nil || string(msg) != "hello through the tunnel" {
			t.Fatalf("echo %q, %v", msg, err)
		}
		if sink.String() != "" {
			t.Fatalf("logged while open: %s", sink.String())
		}
		if err := c.send(ws.OpText, []byte("close:4002")); err != nil {
			t.Fatal(err)
		}
		if code, err := c.readClose(); err != nil || code != 4002 {
			t.Fatalf("close %d, %v", code, err)
		}
		if err := c.send(ws.OpClose, ws.NewCloseFrameBody(4002, "")); err != nil { // the close handshake's answer
			t.Fatal(err)
		}
		line := sink.wait(t, 1)[0]
		status := 200.0
		if proto == ProtocolH1 {
			status = 101
		}
		checkFields(t, line, map[string]any{"status": status, "upstream": "ws", "path": "/ws", "attempts": 1.0})
		if in, out := line["bytes_in"].(float64), line["bytes_out"].(float64); in < float64(len("hello through the tunnel")) || out < float64(len("hello through the tunnel")) {
			t.Errorf("bytes_in %v, bytes_out %v: the tunnel's bytes", in, out)
		}
	})
}

// TestAccessLogMalformedRequest: a malformed request, answered with a
// stream error (H3_MESSAGE_ERROR) rather than a response, is logged as the
// 400 it is counted as, with the host as sent.
func TestAccessLogMalformedRequest(t *testing.T) {
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	h, sink := loggedHarness(t, ProtocolH3, accesslog.Config{}, nil, staticUpstream("u", "/", be))
	wantMessageError(t, dialRaw(t, h), headersFrame(fields(":method", "GET", ":scheme", "https", ":authority", "a b", ":path", "/m")...))
	checkFields(t, sink.wait(t, 1)[0], map[string]any{"status": 400.0, "reason": "invalid_authority", "host": "a b", "path": "/m", "protocol": "h3", "bytes_out": 0.0})
}

// TestAccessLogTraceID: with tracing on, the line carries the request's
// trace ID: the client's traceparent's, or the one the gateway began.
func TestAccessLogTraceID(t *testing.T) {
	tp, _ := newTestTracing(t)
	sink := &logSink{}
	backend := testbackend.NewH1(t, &traceBackend{})
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{staticUpstream("web", "/", backend)}, TracerProvider: tp,
		AccessLog: &accesslog.Config{Writer: sink}}, ListenerConfig{}, ProtocolH2)
	tracedGet(t, h, "/a", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "")
	tracedGet(t, h, "/b", "", "")
	lines := sink.wait(t, 2)
	checkFields(t, lines[0], map[string]any{"trace_id": "0af7651916cd43dd8448eb211c80319c", "path": "/a"})
	if id, _ := lines[1]["trace_id"].(string); len(id) != 32 || id == "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("a new trace's trace_id %q", id)
	}
}

package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestObserversAgree: over every ingress, a mixed run (answers relayed,
// retried, hedged, refused by the route table, a rate limit, a body limit
// and the TCP adapter, backends refusing connections, a WebSocket
// tunnel, gRPC calls, a client that leaves) ends in one Outcome per
// request, so every observer counts the same: the request metrics, the
// access log, the server spans and the status page's counters agree per
// status class and reason, the gRPC metrics per gRPC call, and the
// passive-health side (each backend's request count and in-flight count)
// with the tries the access log reports.
func TestObserversAgree(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		arrived := make(chan struct{}, 1)
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/web/503":
				w.WriteHeader(http.StatusServiceUnavailable)
			case "/web/slow":
				arrived <- struct{}{}
				<-r.Context().Done()
			case "/hedge":
				time.Sleep(30 * time.Millisecond)
				io.WriteString(w, "slow")
			default:
				io.WriteString(w, "ok")
			}
		}))
		fast := testbackend.NewH1(t, named("fast"))
		web := staticUpstream("web", "/web", be)
		web.Static = append(web.Static, closedPort(t, "dead", "http")) // connect failures, retried
		web.MaxRequestBodyBytes = 16
		down := staticUpstream("down", "/down")
		down.Static = []upstream.Spec{closedPort(t, "d1", "http"), closedPort(t, "d2", "http")}
		limited := staticUpstream("limited", "/limited", be)
		limited.RateLimit = &ratelimit.Config{RequestsPerSecond: 0.001, Burst: 1, Key: ratelimit.KeyRoute}
		hedged := staticUpstream("hedged", "/hedge", be, fast)
		hedged.LoadBalancing = "round_robin"
		hedged.Hedge = retry.Hedge{Delay: 5 * time.Millisecond, Max: 1}
		echo := testbackend.NewWSEcho(t)
		ups := []UpstreamConfig{web, down, staticUpstream("empty", "/empty"), limited, hedged, wsUpstream(echo, nil)}
		if proto != ProtocolH1 {
			g := grpcBackend(t)
			g.Routes[0].PathPrefix = "/pkg.Svc/"
			ups = append(ups, g, UpstreamConfig{Config: upstream.Config{Name: "grpc-none"}, Routes: []RouteConfig{{PathPrefix: "/none.Svc/"}}})
		}
		tp, exp := newTestTracing(t)
		m, msink := inmemMetrics()
		sink := &logSink{}
		h := startHarnessConfig(t, Config{Upstreams: ups, AccessLog: &accesslog.Config{Writer: sink}, Metrics: m, TracerProvider: tp},
			ListenerConfig{}, proto)
		unrecordedBefore := unrecorded.Load()

		total := 0
		send := func(method, path string, body string) {
			t.Helper()
			req, _ := http.NewRequest(method, h.base+path, strings.NewReader(body))
			if body == "" {
				req.Body = nil
			}
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			total++
		}
		for range 3 {
			send("GET", "/web/ok", "") // one in two first tries refused, retried
		}
		send("GET", "/web/503", "")
		send("POST", "/web/ok", strings.Repeat("x", 64)) // 413
		send("GET", "/nowhere", "")                      // 404
		send("GET", "/down", "")                         // 502 after a retry
		send("GET", "/empty", "")                        // 503
		send("GET", "/limited", "")
		send("GET", "/limited", "") // 429
		for range 2 {
			send("GET", "/hedge", "")
		}
		// A client that leaves: 499.
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", h.base+"/web/slow", nil)
		done := make(chan error, 1)
		go func() {
			for {
				resp, err := h.client.Do(req)
				if err != nil {
					done <- err
					return
				}
				resp.Body.Close() // the refused backend's retry went elsewhere: again
			}
		}()
		waitFor(t, arrived, "the slow request at the backend")
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("the canceled request: %v", err)
		}
		total++
		// A tunnel, opened and closed.
		c, err := dialWS(t, h, "/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.send(ws.OpText, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.recv(); err != nil {
			t.Fatal(err)
		}
		c.send(ws.OpClose, ws.NewCloseFrameBody(ws.StatusNormalClosure, ""))
		c.readClose()
		c.close()
		total++
		switch proto {
		case ProtocolH1: // the TCP adapter refuses a scheme that is not http(s)
			raw := rawTLS(t, h)
			fmt.Fprintf(raw, "GET ftp://localhost/x HTTP/1.1\r\nHost: localhost\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(raw), nil)
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("absolute-form ftp: %v %v", resp, err)
			}
			raw.Close()
			total++
		default: // gRPC: relayed, and the gateway's own answer
			for _, method := range []string{"/pkg.Svc/Unary", "/none.Svc/Unary"} {
				call := startRawGRPC(t, h.client, h.base, method)
				call.send("hi")
				call.closeSend()
				for {
					if _, err := call.recv(); err != nil {
						break
					}
				}
				total++
			}
		}

		lines := sink.wait(t, total)
		// The access log, the metrics, the spans and the status page, per
		// status class and reason (the status page: per class, routed
		// requests only).
		fromLog, fromLogRouted := map[string]int{}, map[string]int{}
		grpcLines, logTries := 0, 0
		for _, l := range lines {
			class := observe.StatusClass(int(l["status"].(float64)))
			fromLog[class+"/"+l["reason"].(string)]++
			if l["upstream"] != "" && l["upstream"] != nil {
				fromLogRouted[class]++
			}
			if s, _ := l["grpc_status"].(string); s != "" {
				grpcLines++
			}
			logTries += int(l["attempts"].(float64))
		}
		fromMetrics := map[string]int{}
		h.gw.FlushMetrics()
		grpcCounted := 0
		for _, iv := range msink.Data() {
			for _, c := range iv.Counters {
				lb := map[string]string{}
				for _, l := range c.Labels {
					lb[l.Name] = l.Value
				}
				switch c.Name {
				case "impulse.requests":
					if c.Sum > 0 {
						fromMetrics[lb["code"]+"/"+lb["reason"]] += int(c.Sum)
					}
				case "impulse.grpc.requests":
					grpcCounted += int(c.Sum)
				}
			}
		}
		fromSpans := map[string]int{}
		eventually(t, 5*time.Second, func() bool {
			n := 0
			for _, s := range exp.GetSpans() {
				if s.SpanKind == trace.SpanKindServer {
					n++
				}
			}
			return n == total
		}, "a server span per request")
		for _, s := range exp.GetSpans() {
			if s.SpanKind != trace.SpanKindServer {
				continue
			}
			class := "4xx" // 499: no status sent
			if v, ok := attrOf(s, attribute.Key("http.response.status_code")); ok {
				class = observe.StatusClass(int(v.AsInt64()))
			}
			fromSpans[class]++
		}
		byClass := func(m map[string]int) map[string]int {
			out := map[string]int{}
			for k, v := range m {
				out[strings.SplitN(k, "/", 2)[0]] += v
			}
			return out
		}
		fromTraffic := map[string]int{}
		for _, c := range h.gw.Traffic() {
			for class, n := range map[string]uint64{"1xx": c.Informational, "2xx": c.Success, "3xx": c.Redirect, "4xx": c.ClientError, "5xx": c.ServerError} {
				if n > 0 {
					fromTraffic[class] += int(n)
				}
			}
		}
		if fmt.Sprint(fromLog) != fmt.Sprint(fromMetrics) {
			t.Errorf("access log %v\nmetrics    %v", fromLog, fromMetrics)
		}
		if fmt.Sprint(byClass(fromLog)) != fmt.Sprint(fromSpans) {
			t.Errorf("access log %v\nspans      %v", byClass(fromLog), fromSpans)
		}
		if fmt.Sprint(fromLogRouted) != fmt.Sprint(fromTraffic) {
			t.Errorf("access log (routed) %v\nstatus page         %v", fromLogRouted, fromTraffic)
		}
		if grpcLines != grpcCounted || (proto != ProtocolH1 && grpcLines != 2) {
			t.Errorf("gRPC calls: %d in the access log, %d in impulse_grpc_requests", grpcLines, grpcCounted)
		}
		// Passive health and pool accounting: every try the access log
		// reports was counted on its backend, and none is still in flight.
		var backendTries uint64
		for _, b := range h.gw.Backends() {
			backendTries += b.Requests
			if b.InFlight != 0 {
				t.Errorf("backend %s/%s: %d in flight after the run", b.Upstream, b.ID, b.InFlight)
			}
		}
		if backendTries != uint64(logTries) {
			t.Errorf("backends counted %d tries, the access log %d", backendTries, logTries)
		}
		if n := unrecorded.Load() - unrecordedBefore; n != 0 {
			t.Errorf("%d requests ended without an outcome", n)
		}
		for _, want := range []string{"2xx/", "5xx/", "4xx/body_too_large", "4xx/no_route", "5xx/backend_connect_failed",
			"5xx/no_healthy_backend", "4xx/rate_limited", "4xx/client_canceled"} {
			if fromLog[want] == 0 {
				t.Errorf("the run has no %s: %v", want, fromLog)
			}
		}
	})
}

// rawTLS is a TLS connection to h's TCP listener speaking HTTP/1.1.
func rawTLS(t *testing.T, h *harness) *tls.Conn {
	t.Helper()
	c, err := tls.Dial("tcp", strings.TrimPrefix(h.base, "https://"), &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"golang.org/x/net/http2"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// Each try's outcome, and each request's, is the backend's only when the
// backend did it: the tests below are the cases a trial found counted
// against the wrong side.

// TestClientLeavingInBackOffKeepsTheFailure: a try that failed to connect
// stays the backend's failure when the client leaves during the retry's
// back-off (it was counted as the client's cancel, so a dead backend was
// never ejected that way), and the backend picked for the retry, never
// sent to, counts no request. The retry target answers 500 to everything:
// it is failing, so the retry waits out the back-off (a retry to a backend
// that is not failing goes at once).
func TestClientLeavingInBackOffKeepsTheFailure(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		failing := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }))
		uc := staticUpstream("u", "/", failing)
		uc.Static = append([]upstream.Spec{closedPort(t, "closed", "http")}, uc.Static...)
		uc.LoadBalancing = "round_robin"
		uc.Retry = retryOn(2, retry.ConnectFailure)
		uc.Retry.Backoff, uc.Retry.MaxBackoff = 5*time.Second, 5*time.Second
		uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 3, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
		h := newHarnessOver(t, proto, uc)
		closed, target := liveBackend(t, h, "u", "closed"), liveBackend(t, h, "u", "0")
		get := func(timeout time.Duration) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", h.base+"/x", nil)
			if resp, err := h.client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		for !target.Health.Failing() {
			get(10 * time.Second)
		}
		for range 8 {
			get(300 * time.Millisecond) // in the back-off of a refused try, the client leaves
		}
		eventually(t, 5*time.Second, func() bool { return !closed.Eligible() }, "the refusing backend to be ejected")
		eventually(t, 5*time.Second, func() bool { return target.InFlight() == 0 }, "nothing in flight")
		if got, want := target.Requests(), target.Responses().Load().Total(); got != want {
			t.Errorf("the retry target counts %d requests for %d answers: picks never sent were counted", got, want)
		}
	})
}

// TestExtendedConnectRefusedIsNotTheBackendsFailure: a WebSocket over
// HTTP/2 or HTTP/3 to a backend that answers the handshake with a 200
// gets 502 upgrade_refused, and the backend is not blamed: a few such
// handshakes must not eject every backend.
func TestExtendedConnectRefusedIsNotTheBackendsFailure(t *testing.T) {
	forProtocols(t, streamProtocols, func(t *testing.T, proto string) {
		plain := testbackend.NewH1(t, named("plain"))
		uc := staticUpstream("ws", "/ws", plain)
		uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
		h := newHarnessOver(t, proto, uc)
		for range 3 {
			c, err := dialWS(t, h, "/ws", nil)
			if err == nil && c.status != http.StatusBadGateway {
				t.Fatalf("handshake answered %d, want 502 upgrade_refused", c.status)
			}
		}
		if b := liveBackend(t, h, "ws", "0"); !b.Eligible() {
			t.Fatal("the backend was ejected for answering an upgrade with a 200")
		}
	})
}

// TestRequestWithoutAuthorityIsRefused: a request that names no host (an
// HTTP/2 request with neither :authority nor Host, an absolute-form
// target with an empty authority) or one with userinfo in it, is
// malformed (400 invalid_authority), never forwarded with a Host the
// gateway made up.
func TestRequestWithoutAuthorityIsRefused(t *testing.T) {
	var hits testbackend.Counter
	h := newHarnessOver(t, ProtocolH2, staticUpstream("u", "/", testbackend.NewH1(t, testbackend.OK(&hits))))
	c := dialH2(t, h)
	for i, fields := range [][]string{
		{":method", "GET", ":scheme", "https", ":path", "/x"},
		{":method", "GET", ":scheme", "https", ":authority", "", ":path", "/x"},
	} {
		id := uint32(2*i + 1)
		c.buf.Reset()
		for _, f := range h2fields(fields...) {
			c.enc.WriteField(f)
		}
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndHeaders: true, EndStream: true}); err != nil {
			t.Fatal(err)
		}
		if res := c.await(id); res.status != "400" && res.rst == 0 {
			t.Errorf("HTTP/2 %v: %+v, want 400 or a stream reset", fields, res)
		}
	}
	for _, target := range []string{"https:///x", "https://user:pw@localhost/x"} {
		raw := rawTLS(t, h)
		fmt.Fprintf(raw, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(raw), nil)
		raw.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Impulse-Error") != answer.InvalidAuthority.Reason {
			t.Errorf("HTTP/1.1 %s: %v %v, want 400 invalid_authority", target, resp, err)
		}
	}
	if hits.Total.Load() != 0 {
		t.Errorf("%d requests reached the backend", hits.Total.Load())
	}
}

// TestOptionsAsteriskReachesThePipeline: OPTIONS * over HTTP/1.1 and
// HTTP/2 gets the pipeline's answer (404 no_route, with its request ID),
// as over HTTP/3, not net/http's own 200.
func TestOptionsAsteriskReachesThePipeline(t *testing.T) {
	h := newHarnessOver(t, ProtocolH1, staticUpstream("u", "/", testbackend.NewH1(t, named("u"))))
	raw := rawTLS(t, h)
	fmt.Fprintf(raw, "OPTIONS * HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(raw), nil)
	raw.Close()
	if err != nil || resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("OPTIONS * over HTTP/1.1: %v %v, want the pipeline's 404", resp, err)
	}
	c := dialH2(t, h)
	c.request(1, "OPTIONS", "*", true)
	if res := c.await(1); res.status != "404" {
		t.Fatalf("OPTIONS * over HTTP/2: %+v, want 404", res)
	}
}

// TestForcedCloseLogsOpenTunnels: Close (the forced stop) cuts an open
// HTTP/1.1 WebSocket, and its access-log line is written before the log
// closes.
func TestForcedCloseLogsOpenTunnels(t *testing.T) {
	e := testbackend.NewWSEcho(t)
	h, sink := loggedHarness(t, ProtocolH1, accesslog.Config{}, nil, wsUpstream(e, nil))
	c, err := dialWS(t, h, "/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.send(ws.OpText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.recv(); err != nil {
		t.Fatal(err)
	}
	h.gw.Close()
	lines := sink.lines(t)
	if len(lines) != 1 || lines[0]["path"] != "/ws" {
		t.Fatalf("access log after Close: %v, want the tunnel's line", lines)
	}
}

// TestTunnelBrokenByItsBackend: a WebSocket whose backend dies mid-stream
// (its connection reset, no close frame) is recorded as the backend's
// failure, backend_body_failed, not as a clean close.
func TestTunnelBrokenByItsBackend(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	testbackend.ServeConns(t, ln, func(c net.Conn) {
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
			tunnel.WebSocketAccept(req.Header.Get("Sec-Websocket-Key")))
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close() // dies: a reset, no close frame
	})
	uc := UpstreamConfig{Config: upstream.Config{Name: "ws", ResponseHeaderTimeout: 5 * time.Second}, Routes: []RouteConfig{{PathPrefix: "/ws"}},
		Static: []upstream.Spec{{ID: "0", Scheme: "http", Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port, Weight: 1}}}
	h, sink := loggedHarness(t, ProtocolH1, accesslog.Config{}, nil, uc)
	c, err := dialWS(t, h, "/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	lines := sink.wait(t, 1)
	if lines[0]["reason"] != answer.BodyFailed.Reason {
		t.Fatalf("access log %v, want reason %s", lines[0], answer.BodyFailed.Reason)
	}
}

// TestReloadKeepsBackendCounts: a reload that rebuilds an upstream (another
// balancing policy) keeps each backend's request and response counts.
func TestReloadKeepsBackendCounts(t *testing.T) {
	uc := staticUpstream("u", "/", testbackend.NewH1(t, named("a")))
	h := newHarness(t, uc)
	for range 3 {
		resp := h.get("/")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	uc.LoadBalancing = "least_request"
	if err := h.gw.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{uc}, Listeners: []ListenerConfig{h.listenerConfig()}}); err != nil {
		t.Fatal(err)
	}
	b := liveBackend(t, h, "u", "0")
	if b.Requests() != 3 || b.Responses().Load().Success != 3 {
		t.Fatalf("after the reload: %d requests, %+v, want the 3 before it", b.Requests(), b.Responses().Load())
	}
}

// TestClientLeavingIsNotOnTheBackendsRow: a request whose client left is
// counted for its upstream (what clients got) but not on its backend's
// row, which counts the backend's answers.
func TestClientLeavingIsNotOnTheBackendsRow(t *testing.T) {
	stall := testbackend.NewStall(t)
	h := newHarness(t, staticUpstream("u", "/", stall.Server))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", h.base+"/x", nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := h.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	eventually(t, 5*time.Second, func() bool { return stall.Arrived.Load() == 1 }, "the request at the backend")
	cancel()
	<-done
	eventually(t, 5*time.Second, func() bool { return h.gw.Traffic()["u"].ClientError == 1 }, "the 499 on the upstream")
	if c := liveBackend(t, h, "u", "0").Responses().Load(); c.Total() != 0 {
		t.Errorf("the backend's row counts %+v for a client that left", c)
	}
}

// liveBackend is the backend id of the named upstream in the current table.
func liveBackend(t *testing.T, h *harness, up, id string) *upstream.Backend {
	t.Helper()
	for _, b := range h.gw.table.Load().upstreams[up].Current().Backends {
		if b.ID == id {
			return b
		}
	}
	t.Fatalf("upstream %s has no backend %s", up, id)
	return nil
}

// TestClientLeavingATunnelIsNotTheBackendsFailure: a WebSocket client
// that ends its half without a close frame (FIN, END_STREAM: a killed tab,
// a phone off the network) leaves the backend to close without one too;
// that is the client's doing, not a broken backend. A trial found five
// such clients ejecting a healthy backend (backend_body_failed).
func TestClientLeavingATunnelIsNotTheBackendsFailure(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		echo := testbackend.NewWSEcho(t)
		uc := staticUpstream("ws", "/ws", echo.Server)
		uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
		h, sink := loggedHarness(t, proto, accesslog.Config{}, nil, uc)
		for i := range 3 {
			c, err := dialWS(t, h, "/ws", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.send(ws.OpText, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			if got, _, err := c.recv(); err != nil || string(got) != "hi" {
				t.Fatalf("echo: %q %v", got, err)
			}
			c.end() // no close frame
			line := sink.wait(t, i+1)[i]
			c.close()
			if line["reason"] == answer.BodyFailed.Reason {
				t.Fatalf("tunnel %d: access log %v: the client's leaving blamed on the backend", i, line)
			}
		}
		if b := liveBackend(t, h, "ws", "0"); !b.Eligible() || b.Health.Failing() {
			t.Fatalf("the backend is ejected or failing after clients left: eligible %v, failing %v", b.Eligible(), b.Health.Failing())
		}
	})
}

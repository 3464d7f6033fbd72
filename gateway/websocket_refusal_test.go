package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
)

// wsStatus is the status a WebSocket handshake through h gets.
func wsStatus(t *testing.T, h *harness, path string, extra http.Header) (int, *wsClient) {
	t.Helper()
	c, err := dialWS(t, h, path, extra)
	if c == nil {
		t.Fatalf("dial: %v", err)
	}
	if c.close != nil && c.rw != nil {
		t.Cleanup(c.close)
	}
	return c.status, c
}

// TestI05WebSocketRefused: the gateway's own refusals of a WebSocket, over
// each ingress: a route without WebSocket (403), an HTTP/2 backend (501),
// the wrong version (400, with the version it takes), a backend's own
// refusal relayed.
func TestI05WebSocketRefused(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		e := testbackend.NewWSEcho(t)
		none := wsUpstream(e, []string{})
		none.Name, none.Routes[0].PathPrefix = "none", "/none"
		h2b := staticUpstream("h2", "/h2", testbackend.NewH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
		refusing := staticUpstream("refusing", "/refusing", testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no sockets here", http.StatusForbidden)
		})))
		h := newHarnessOver(t, proto, none, h2b, refusing, wsUpstream(e, nil))
		for _, tc := range []struct {
			path   string
			extra  http.Header
			status int
			reason string
		}{
			{"/none", nil, http.StatusForbidden, answer.UpgradeNotAllowed.Reason},
			{"/h2", nil, http.StatusNotImplemented, answer.UpgradeBackend.Reason},
			{"/refusing", nil, http.StatusForbidden, ""},
		} {
			status, c := wsStatus(t, h, tc.path, tc.extra)
			if status != tc.status {
				t.Fatalf("%s: status %d, want %d", tc.path, status, tc.status)
			}
			if c.resp != nil && c.resp.Header.Get("X-Impulse-Error") != tc.reason {
				t.Fatalf("%s: reason %q, want %q", tc.path, c.resp.Header.Get("X-Impulse-Error"), tc.reason)
			}
		}
		// The wrong version: 400 naming the one the gateway takes.
		var resp *http.Response
		if proto == ProtocolH1 {
			resp = h1Upgrade(t, h, "/ws", http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Version": {"12"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}})
		} else {
			_, c := wsStatus(t, h, "/ws", http.Header{"Sec-Websocket-Version": {"12"}})
			resp = c.resp
		}
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Sec-Websocket-Version") != "13" ||
			resp.Header.Get("X-Impulse-Error") != answer.WebSocketHandshake.Reason {
			t.Fatalf("version 12: %d %v", resp.StatusCode, resp.Header)
		}
	})
}

// h1Upgrade sends GET path with "Connection: Upgrade" and fields over
// HTTP/1.1 and returns the answer.
func h1Upgrade(t *testing.T, h *harness, path string, fields http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.base+path, nil)
	req.Header = fields.Clone()
	req.Header.Set("Connection", "Upgrade")
	tr := clientTransport(ProtocolH1, &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"}).(*http.Transport)
	defer tr.CloseIdleConnections()
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestI05HandshakeFields: HTTP/1.1 handshakes the gateway refuses itself
// (400 invalid_websocket_handshake): no Sec-WebSocket-Key, a key that is
// not 16 bytes, no version; and upgrades other than WebSocket, refused
// (403) unless the route lists them.
func TestI05HandshakeFields(t *testing.T) {
	e := testbackend.NewWSEcho(t)
	raw := testbackend.NewH1(t, http.HandlerFunc(rawUpgradeEcho))
	custom := staticUpstream("custom", "/custom", raw)
	custom.Routes[0].Upgrades = []string{"websocket", "x-test/1"}
	h := newHarnessOver(t, ProtocolH1, wsUpstream(e, nil), custom)
	key := "dGhlIHNhbXBsZSBub25jZQ=="
	for name, tc := range map[string]struct {
		path   string
		fields http.Header
		status int
	}{
		"no key":       {"/ws", http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}}, 400},
		"short key":    {"/ws", http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"c2hvcnQ="}}, 400},
		"no version":   {"/ws", http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Key": {key}}, 400},
		"h2c":          {"/ws", http.Header{"Upgrade": {"h2c"}, "Http2-Settings": {"AAMAAABkAARAAAAAAAIAAAAA"}}, 403},
		"not listed":   {"/custom", http.Header{"Upgrade": {"x-other"}}, 403},
		"listed":       {"/custom", http.Header{"Upgrade": {"x-test/1"}}, 101},
		"listed, case": {"/custom", http.Header{"Upgrade": {"X-Test/1"}}, 101},
	} {
		t.Run(name, func(t *testing.T) {
			if resp := h1Upgrade(t, h, tc.path, tc.fields); resp.StatusCode != tc.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, resp.Header.Get("X-Impulse-Error"), tc.status)
			}
		})
	}
	// A listed upgrade is a byte tunnel.
	conn, err := tls.Dial("tcp", strings.TrimPrefix(h.base, "https://"), &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "GET /custom HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: x-test/1\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 || resp.Header.Get("Upgrade") != "x-test/1" {
		t.Fatalf("switch: %v %v", resp, err)
	}
	_, _ = io.WriteString(conn, "hello tunnel")
	buf := make([]byte, len("hello tunnel"))
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "hello tunnel" {
		t.Fatalf("tunnel echo %q, %v", buf, err)
	}
}

// rawUpgradeEcho switches to whatever protocol the request names and
// echoes bytes.
func rawUpgradeEcho(w http.ResponseWriter, r *http.Request) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + r.Header.Get("Upgrade") + "\r\n\r\n")
	_ = brw.Flush()
	_, _ = io.Copy(conn, brw)
}

// TestI05PlainConnectRefused: a CONNECT without :protocol (or over
// HTTP/1.1, any CONNECT) gets 501: the gateway is not a forward proxy.
func TestI05PlainConnectRefused(t *testing.T) {
	e := testbackend.NewWSEcho(t)
	forEachProtocol(t, func(t *testing.T, proto string) {
		h := newHarnessOver(t, proto, wsUpstream(e, nil))
		addr := strings.TrimPrefix(h.base, "https://")
		tc := &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"}
		var status int
		switch proto {
		case ProtocolH1:
			tc.NextProtos = []string{"http/1.1"}
			conn, err := tls.Dial("tcp", addr, tc)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_, _ = io.WriteString(conn, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			status = resp.StatusCode
		case ProtocolH2:
			tr := &http2.Transport{TLSClientConfig: tc}
			defer tr.CloseIdleConnections()
			pr, pw := io.Pipe()
			defer pw.Close()
			req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Scheme: "https", Host: addr}, Host: "example.com:443", Header: http.Header{}, Body: pr}
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			status = resp.StatusCode
		default:
			tr := &http3.Transport{TLSClientConfig: tc}
			defer tr.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodConnect, "https://"+addr, nil)
			req.Host = "example.com:443"
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			status = resp.StatusCode
		}
		if status != http.StatusNotImplemented {
			t.Fatalf("plain CONNECT: %d, want 501", status)
		}
	})
}

// TestI05BackendBreaksMidMessage: a backend that closes in the middle of a
// frame ends the client's side with an error (a reset), never a clean end.
func TestI05BackendBreaksMidMessage(t *testing.T) {
	broken := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, _, err := ws.UpgradeHTTP(r, w)
		if err != nil {
			return
		}
		_ = ws.WriteHeader(conn, ws.Header{Fin: true, OpCode: ws.OpBinary, Length: 1000})
		_, _ = conn.Write([]byte("0123456789"))
		conn.Close()
	}))
	forEachProtocol(t, func(t *testing.T, proto string) {
		h := newHarnessOver(t, proto, staticUpstream("ws", "/ws", broken))
		c, err := dialWS(t, h, "/ws", nil)
		if err != nil {
			var se *http3.Error
			if proto == ProtocolH3 && errors.As(err, &se) {
				return // the reset overtook the response headers: an error all the same
			}
			t.Fatal(err)
		}
		defer c.close()
		got, err := io.ReadAll(c.rw)
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("read %d bytes, then %v: want an error", len(got), err)
		}
		if len(got) < 10 && proto != ProtocolH3 { // QUIC's reset may drop what the client had not read yet
			t.Fatalf("read %d bytes before the error, want the 12 sent", len(got))
		}
	})
}

// TestI05HandshakeRetriedOnConnectFailure: a WebSocket handshake whose
// backend refuses the connection goes to another backend, as any
// request's connect-failure retry: the backend never saw it. With a dead
// and a live backend under round_robin every handshake succeeds, and the
// retries are counted.
func TestI05HandshakeRetriedOnConnectFailure(t *testing.T) {
	e := testbackend.NewWSEcho(t)
	forEachProtocol(t, func(t *testing.T, proto string) {
		uc := wsUpstream(e, nil)
		uc.Static = append([]upstream.Spec{closedPort(t, "dead", "http")}, uc.Static...)
		h := newHarnessOver(t, proto, uc)
		for i := range 4 {
			c, err := dialWS(t, h, "/ws/echo", nil)
			if err != nil {
				t.Fatalf("handshake %d: %v", i, err)
			}
			if err := c.send(ws.OpText, []byte("hi")); err != nil {
				t.Fatal(err)
			}
			if got, _, err := c.recv(); err != nil || string(got) != "hi" {
				t.Fatalf("echo %d: %q %v", i, got, err)
			}
			c.close()
		}
		if n := counted(h.gw, observe.Retried, "ws", "connect-failure"); n < 1 {
			t.Errorf("impulse_retries = %v, want the handshakes to the dead backend counted", n)
		}
	})
}

package gateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// wsEchoDuration is how long TestI05WebSocket echoes both ways: the
// issue's 30 s, shortened by IMPULSE_WS_ECHO (a Go duration) for a quick run.
func wsEchoDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("IMPULSE_WS_ECHO")); err == nil {
		return d
	}
	return 30 * time.Second
}

// wsUpstream routes /ws to the echo backend with the route's upgrades
// (nil: the default, WebSocket).
func wsUpstream(e *testbackend.WSEcho, upgrades []string) UpstreamConfig {
	uc := staticUpstream("ws", "/ws", e.Server)
	uc.Routes[0].Upgrades = upgrades
	return uc
}

// TestI05WebSocket is case I05 over each ingress: HTTP/1.1 Upgrade, RFC 8441
// over HTTP/2, RFC 9220 over HTTP/3, to one HTTP/1.1 coder/websocket echo
// backend. The backend sees the client's Sec-WebSocket-* fields and no
// hop-by-hop ones; pings go both ways; a 10 MiB message passes each way;
// messages echo both ways for wsEchoDuration; a close code reaches the
// other side and ends the tunnel cleanly.
func TestI05WebSocket(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		t.Parallel()
		e := testbackend.NewWSEcho(t)
		h := newHarnessOver(t, proto, wsUpstream(e, nil))
		c, err := dialWS(t, h, "/ws/echo", http.Header{"Keep-Alive": {"timeout=5"}, "X-Trace": {"t1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		if proto != ProtocolH1 {
			if c.resp.Header.Get("Sec-Websocket-Protocol") != "chat" || c.resp.Header.Get("Sec-Websocket-Accept") != "" {
				t.Fatalf("handshake answer fields %v", c.resp.Header)
			}
		}
		if got := e.Header("Sec-Websocket-Protocol"); got != "chat" {
			t.Errorf("backend saw Sec-WebSocket-Protocol %q", got)
		}
		if got := e.Header("Sec-Websocket-Version"); got != "13" {
			t.Errorf("backend saw Sec-WebSocket-Version %q", got)
		}
		if e.Header("Keep-Alive") != "" || e.Header("X-Trace") != "t1" {
			t.Errorf("backend saw Keep-Alive %q, X-Trace %q", e.Header("Keep-Alive"), e.Header("X-Trace"))
		}
		eventually(t, 5*time.Second, func() bool { return openTunnels(h.gw, "ws") == 1 }, "the open-tunnel gauge")

		// Pings: the backend's (answered by the client library), then the client's.
		if err := c.send(ws.OpText, []byte("ping-me")); err != nil {
			t.Fatal(err)
		}
		if msg, _, err := c.recv(); err != nil || string(msg) != "pong-ok" {
			t.Fatalf("after the backend's ping: %q, %v", msg, err)
		}
		if err := wsutil.WriteClientMessage(c.rw, ws.OpPing, []byte("p1")); err != nil {
			t.Fatal(err)
		}
		if f, err := ws.ReadFrame(c.rw); err != nil || f.Header.OpCode != ws.OpPong || string(f.Payload) != "p1" {
			t.Fatalf("pong: %v %q, %v", f.Header.OpCode, f.Payload, err)
		}

		// A 10 MiB message each way.
		big := make([]byte, 10<<20)
		rand.Read(big)
		sending := make(chan struct{})
		go func() { defer close(sending); _ = c.send(ws.OpBinary, big) }()
		if msg, op, err := c.recv(); err != nil || op != ws.OpBinary || !bytes.Equal(msg, big) {
			t.Fatalf("10 MiB echo: %d bytes, op %v, %v", len(msg), op, err)
		}
		<-sending // one writer at a time

		// Both ways, for a while: a sender and a reader at once, until the
		// sender's last message.
		stop := time.Now().Add(wsEchoDuration())
		sending = make(chan struct{})
		go func() {
			defer close(sending)
			for n := 0; time.Now().Before(stop); n++ {
				if c.send(ws.OpText, fmt.Appendf(nil, "m%d", n)) != nil {
					return
				}
				time.Sleep(20 * time.Millisecond) // pacing the sender, not waiting for a condition
			}
			_ = c.send(ws.OpText, []byte("end"))
		}()
		for i := 0; ; i++ {
			msg, _, err := c.recv()
			if err == nil && string(msg) == "end" && i > 0 {
				break
			}
			if err != nil || string(msg) != fmt.Sprintf("m%d", i) {
				t.Fatalf("echo %d: %q, %v", i, msg, err)
			}
		}
		<-sending
		// The client closes with a code: the backend sees it and answers.
		if err := c.send(ws.OpClose, ws.NewCloseFrameBody(4001, "done")); err != nil {
			t.Fatal(err)
		}
		if code := <-e.Closes; code != 4001 {
			t.Fatalf("backend saw close %d", code)
		}
		if code, err := c.readClose(); err != nil || code != 4001 {
			t.Fatalf("client got close %d, %v; want the echoed 4001", code, err)
		}
		eventually(t, 5*time.Second, func() bool { return openTunnels(h.gw, "ws") == 0 }, "the tunnel to end")
		if up, down := tunnelBytes(h.gw, "ws"); up < 10<<20 || down < 10<<20 {
			t.Fatalf("tunnel bytes to backend %d, to client %d", up, down)
		}
	})
}

// TestI05WebSocketCloseFromBackend: a close code the backend starts with
// reaches the client, over each ingress.
func TestI05WebSocketCloseFromBackend(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		e := testbackend.NewWSEcho(t)
		h := newHarnessOver(t, proto, wsUpstream(e, nil))
		c, err := dialWS(t, h, "/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		if err := c.send(ws.OpText, []byte("close:4002")); err != nil {
			t.Fatal(err)
		}
		if code, err := c.readClose(); err != nil || code != 4002 {
			t.Fatalf("client got close %d, %v; want 4002", code, err)
		}
	})
}

// TestI05WebSocketLibraryClient: coder/websocket's own client over the
// HTTP/1.1 ingress, with a 10 MiB message.
func TestI05WebSocketLibraryClient(t *testing.T) {
	e := testbackend.NewWSEcho(t)
	h := newHarnessOver(t, ProtocolH1, wsUpstream(e, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "wss"+h.base[len("https"):]+"/ws", &websocket.DialOptions{HTTPClient: h.client, Subprotocols: []string{"chat"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 20)
	big := bytes.Repeat([]byte("0123456789abcdef"), 10<<20/16)
	if err := c.Write(ctx, websocket.MessageBinary, big); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.Read(ctx); err != nil || !bytes.Equal(msg, big) {
		t.Fatalf("echo: %d bytes, %v", len(msg), err)
	}
	if err := c.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatal(err)
	}
	if code := <-e.Closes; code != websocket.StatusNormalClosure {
		t.Fatalf("backend saw %d", code)
	}
}

// TestI05DrainClosesTunnel: a drain waits for an open WebSocket (it still
// echoes meanwhile), and at drain_timeout closes it with 1001 (going away)
// toward both the client and the backend.
func TestI05DrainClosesTunnel(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		e := testbackend.NewWSEcho(t)
		h := newHarnessOver(t, proto, wsUpstream(e, nil))
		c, err := dialWS(t, h, "/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		eventually(t, 5*time.Second, func() bool { return openTunnels(h.gw, "ws") == 1 }, "the tunnel")
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- h.gw.Shutdown(ctx) }()
		// Within the drain, the tunnel still works.
		if err := c.send(ws.OpText, []byte("during")); err != nil {
			t.Fatal(err)
		}
		if msg, _, err := c.recv(); err != nil || string(msg) != "during" {
			t.Fatalf("echo during the drain: %q, %v", msg, err)
		}
		if code, err := c.readClose(); err != nil || code != ws.StatusGoingAway {
			t.Fatalf("client got close %d, %v; want 1001", code, err)
		}
		if code := <-e.Closes; code != websocket.StatusGoingAway {
			t.Fatalf("backend saw %d, want 1001", code)
		}
		if err := <-done; err == nil {
			t.Error("Shutdown reported a drain that ran out of time as complete")
		}
		if d := time.Since(start); d < 600*time.Millisecond {
			t.Fatalf("the drain ended the tunnel after %v, before drain_timeout", d)
		}
	})
}

// openTunnels is the open-tunnel gauge of upstream (websocket).
func openTunnels(g *Gateway, up string) int64 {
	return g.obs.Metrics.OpenTunnels(up)
}

// tunnelBytes is the bytes relayed through upstream's tunnels each way.
func tunnelBytes(g *Gateway, up string) (toBackend, toClient uint64) {
	return g.obs.Metrics.TunnelBytesOf(up)
}

// TestI05ReloadDropsProtocolDrainsTunnels: a reload that turns HTTP/1.1 and
// HTTP/2 off drains their tunnels as a shutdown does (close 1001 at the
// reload's drain deadline; an HTTP/1.1 one is hijacked, so net/http would
// forget it), while the HTTP/3 one stays open.
func TestI05ReloadDropsProtocolDrainsTunnels(t *testing.T) {
	e := testbackend.NewWSEcho(t)
	up := wsUpstream(e, nil)
	h := newHarnessOver(t, ProtocolH1, up)
	clients := map[string]*wsClient{}
	for _, p := range protocols {
		hp := *h
		hp.proto = p
		c, err := dialWS(t, &hp, "/ws", nil)
		if err != nil {
			t.Fatal(p, err)
		}
		defer c.close()
		clients[p] = c
	}
	eventually(t, 5*time.Second, func() bool { return openTunnels(h.gw, "ws") == 3 }, "three tunnels")
	lc := ListenerConfig{Name: "test", Address: "127.0.0.1:0", Protocols: []string{ProtocolH3}, TLS: &tls.Config{Certificates: []tls.Certificate{h.cert.TLS}}}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := h.gw.Apply(ctx, Config{Upstreams: []UpstreamConfig{up}, Listeners: []ListenerConfig{lc}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range tcpProtocols {
		if code, err := clients[p].readClose(); err != nil || code != ws.StatusGoingAway {
			t.Fatalf("%s: close %d, %v; want 1001", p, code, err)
		}
	}
	c := clients[ProtocolH3]
	if err := c.send(ws.OpText, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if msg, _, err := c.recv(); err != nil || string(msg) != "still here" {
		t.Fatalf("h3 tunnel after the reload: %q, %v", msg, err)
	}
	eventually(t, 5*time.Second, func() bool { return openTunnels(h.gw, "ws") == 1 }, "one tunnel left")
}

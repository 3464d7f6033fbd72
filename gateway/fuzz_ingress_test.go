package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/impulse-agent/impulse-agent/gateway/ingress"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// Bounds of one FuzzIngress exchange.
const (
	// ingressSettle is how long the server may work on the input before
	// the client hangs up anyway (a request waiting for body bytes that
	// will never come).
	ingressSettle = 10 * time.Millisecond
	// ingressHang bounds everything after the hang-up: the connection
	// closed and every handler returned, or the handler hangs.
	ingressHang = 5 * time.Second
)

// ingressHarness is a gateway whose TCP ingress server (NewTCPServer: the
// adapter, limits and handler of a real listener) serves in-memory
// connections without TLS: HTTP/1.1, and HTTP/2 with prior knowledge, so
// the fuzzer's bytes are what the parsers see. /h2c leads to a
// strictH2Backend, every other path to a strictBackend.
type ingressHarness struct {
	gw  *Gateway
	l   *ingress.Listener
	srv *http.Server
	ln  *connListener
	be  *strictBackend   // HTTP/1.1, every path but /h2c
	be2 *strictH2Backend // h2c, /h2c

	mu     sync.Mutex
	panics []string // what net/http logged as a handler panic
	open   int      // connections the server has not finished with
}

func (h *ingressHarness) Write(p []byte) (int, error) {
	if s := string(p); strings.Contains(s, "panic") {
		h.mu.Lock()
		h.panics = append(h.panics, s)
		h.mu.Unlock()
	}
	return len(p), nil
}

func newIngressHarness(f testing.TB) *ingressHarness {
	be, err := newStrictBackend()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(be.Close)
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		f.Fatal(err)
	}
	be2, err := newStrictH2Backend()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(be2.Close)
	uc := UpstreamConfig{Config: upstream.Config{Name: "strict", ResponseHeaderTimeout: 5 * time.Second},
		Routes: []RouteConfig{{PathPrefix: "/"}},
		Static: []upstream.Spec{{ID: "0", Scheme: "http", Host: "127.0.0.1", Port: be.Addr().(*net.TCPAddr).Port, Weight: 1}}}
	uc2 := UpstreamConfig{Config: upstream.Config{Name: "strict-h2c", ResponseHeaderTimeout: 5 * time.Second},
		Routes: []RouteConfig{{PathPrefix: "/h2c"}},
		Static: []upstream.Spec{{ID: "0", Scheme: "h2c", Host: "127.0.0.1", Port: be2.Addr().(*net.TCPAddr).Port, Weight: 1}}}
	gw, err := New(Config{Upstreams: []UpstreamConfig{uc, uc2}})
	if err != nil {
		f.Fatal(err)
	}
	lc := ListenerConfig{Name: "fuzz", Address: "127.0.0.1:0", Protocols: []string{ProtocolH1, ProtocolH2},
		TLS: &tls.Config{Certificates: []tls.Certificate{cert.TLS}}}
	if err := gw.Start(context.Background(), []ListenerConfig{lc}); err != nil {
		f.Fatal(err)
	}
	h := &ingressHarness{gw: gw, be: be, be2: be2, ln: newConnListener()}
	gw.mu.Lock()
	h.l = gw.listeners["fuzz"]
	gw.mu.Unlock()
	h.srv = h.l.NewTCPServer()
	h.srv.TLSConfig = nil
	h.srv.Protocols.SetUnencryptedHTTP2(true)
	h.srv.ErrorLog = log.New(h, "", 0)
	metrics := h.srv.ConnState
	h.srv.ConnState = func(c net.Conn, s http.ConnState) {
		metrics(c, s)
		c.(*fuzzConn).setState(s)
		h.mu.Lock()
		switch s {
		case http.StateNew:
			h.open++
		case http.StateClosed, http.StateHijacked:
			h.open--
		}
		h.mu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.srv.Serve(h.ln)
	}()
	f.Cleanup(func() {
		h.ln.Close()
		_ = h.srv.Close()
		<-done
		// HTTP/2 connections that went away end on their own timer.
		for deadline := time.Now().Add(ingressHang); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			h.mu.Lock()
			open := h.open
			h.mu.Unlock()
			if open == 0 {
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	return h
}

// exchange serves one connection that sends input, then hangs up once the
// server is stuck waiting for more (or after ingressSettle). It fails t
// when, within ingressHang of the hang-up, the server has not closed the
// connection (or sent GOAWAY) and every handler returned, when a handler
// panicked, or when a backend got a malformed request. It returns what the
// server wrote.
func (h *ingressHarness) exchange(t testing.TB, input []byte) []byte {
	c := newFuzzConn(input)
	if !h.ln.serve(c) {
		t.Fatal("listener closed")
	}
	c.waitFor(ingressSettle, (*fuzzConn).stuck)
	c.hangUp()
	// An HTTP/2 connection that went away is as good as closed: the
	// server closes it on its own timer (fuzzConn.goneAway).
	closed := c.waitFor(ingressHang, func(c *fuzzConn) bool { return c.closed || c.state == http.StateClosed || c.goneAway() })
	deadline := time.Now().Add(ingressHang)
	for h.l.InFlight() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // handlers end on their own goroutines; no event to wait on
	}
	if !closed || h.l.InFlight() != 0 {
		t.Fatalf("%v after the client hung up: connection closed %v, %d handlers running; input %q", ingressHang, closed, h.l.InFlight(), input)
	}
	h.mu.Lock()
	panics := h.panics
	h.panics = nil
	h.mu.Unlock()
	if len(panics) > 0 {
		t.Fatalf("handler panic on input %q:\n%s", input, strings.Join(panics, "\n"))
	}
	if problems, _ := h.be.take(); len(problems) > 0 {
		t.Fatalf("the backend got a malformed request from input %q:\n%s", input, strings.Join(problems, "\n"))
	}
	if problems := h.be2.take(); len(problems) > 0 {
		t.Fatalf("the h2c backend got a malformed request from input %q:\n%s", input, strings.Join(problems, "\n"))
	}
	return c.output()
}

// h2Request is the HTTP/2 connection of fields (lines "name: value"; a
// pseudo-header's name keeps its leading ":") and body: the preface, an
// empty SETTINGS, one HEADERS block on stream 1 and the body as one DATA
// frame, END_STREAM on the last.
func h2Request(fields string, body []byte) []byte {
	var buf bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	_ = fr.WriteSettings()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, line := range strings.Split(fields, "\n") {
		start := 0
		if strings.HasPrefix(line, ":") {
			start = 1
		}
		i := strings.IndexByte(line[start:], ':')
		if i < 0 {
			continue
		}
		i += start
		_ = enc.WriteField(hpack.HeaderField{Name: line[:i], Value: strings.TrimPrefix(line[i+1:], " ")})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true, EndStream: len(body) == 0})
	if len(body) > 0 {
		_ = fr.WriteData(1, true, body)
	}
	return buf.Bytes()
}

// FuzzIngress sends arbitrary bytes through the TCP ingress (net/http's
// HTTP/1.1 parser, or its HTTP/2 server with prior knowledge), the TCP
// adapter and the whole handler to a strict backend. mode picks how data
// is sent: 0 as HTTP/1.x bytes; 1 as HTTP/2 frames after the preface; 2 as
// one HTTP/2 request built from it (header lines, an empty line, the
// body), HPACK-encoded whatever the names and values. Whatever the client
// sends, no handler panics or hangs (the connection ends, or goes away,
// and every handler returns within ingressHang of the client hanging up),
// and every
// request that reaches a backend is well-formed (strictBackend for
// HTTP/1.1, strictH2Backend for h2c under /h2c).
func FuzzIngress(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"GET /a/../b?q=1 HTTP/1.1\r\nHost: a.example\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nTE: trailers\r\n\r\nGET /2 HTTP/1.1\r\nHost: a.example\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 1\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: a.example\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\nabc",
		"GET http://other.example/x HTTP/1.1\r\nHost: a.example\r\n\r\nGET https://b.example HTTP/1.1\r\nHost: a\r\n\r\n",
		"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: a.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58",
		"GET /h2c HTTP/1.1\r\nHost: a.example\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET /%2e%2e/%2Fetc HTTP/1.1\r\nHost: A.Example.:443\r\nX-Request-Id: a\r\nX-Request-Id: b\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\nX: y\n\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET * HTTP/1.1\r\nHost: a\r\n\r\n",
		"HEAD / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"POST /h2c/p HTTP/1.1\r\nHost: a.example\r\nTE: trailers\r\nTransfer-Encoding: chunked\r\nTrailer: grpc-status\r\n\r\n3\r\nabc\r\n0\r\ngrpc-status: 0\r\n\r\n",
		"GET /h2c/ws HTTP/1.1\r\nHost: a.example\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
	} {
		f.Add(byte(0), []byte(s))
	}
	for _, s := range []struct{ fields, body string }{
		{":method: GET\n:scheme: https\n:authority: a.example\n:path: /\nuser-agent: fuzz", ""},
		{":method: POST\n:scheme: https\n:authority: a.example\n:path: /p?x=1\ncontent-length: 3\ncontent-length: 4\nte: trailers", "abc"},
		{":method: CONNECT\n:protocol: websocket\n:scheme: https\n:authority: a.example\n:path: /ws\nsec-websocket-version: 13", "\x81\x80\x00\x00\x00\x00"},
		{":method: GET\n:scheme: https\n:authority: a.example\n:path: /x\nconnection: close\nx-a: b\r\nc", ""},
		{":method: GET\n:scheme: http\n:path: //a/../../b\nhost: a.example\ncookie: a=1\ncookie: b=2\nX-Upper: 1", ""},
		{":method: GET\n:scheme: https\n:authority: a.example\n:path: *", ""},
		{":method: POST\n:scheme: https\n:authority: a.example\n:path: /h2c/x\ncontent-type: application/grpc\nte: trailers\ngrpc-timeout: 1S", "\x00\x00\x00\x00\x00"},
	} {
		f.Add(byte(2), []byte(s.fields+"\n\n"+s.body))
		f.Add(byte(1), h2Request(s.fields, []byte(s.body))[len(http2.ClientPreface):])
	}
	h := newIngressHarness(f)
	f.Fuzz(func(t *testing.T, mode byte, data []byte) {
		var input []byte
		switch mode % 3 {
		case 0:
			input = data
		case 1:
			input = append([]byte(http2.ClientPreface), data...)
		case 2:
			fields, body, _ := bytes.Cut(data, []byte("\n\n"))
			input = h2Request(string(fields), body)
		}
		h.exchange(t, input)
	})
}

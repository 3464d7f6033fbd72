package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestLimitHeaderBytesH2: over HTTP/2 the limit is advertised in
// SETTINGS_MAX_HEADER_LIST_SIZE (Go's client keeps to it), and a header
// list beyond it gets 431 from Go's server without reaching the backend;
// a single field longer than the limit ends the connection.
func TestLimitHeaderBytesH2(t *testing.T) {
	var cb testbackend.Counter
	h := startHarness(t, ListenerConfig{Limits: Limits{MaxHeaderBytes: 4096}}, ProtocolH2, countingUpstream(t, &cb))
	c := dialH2(t, h)
	if got := c.settings[http2.SettingMaxHeaderListSize]; got < 4096 || got > 4096+1024 {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE %d, want 4096 plus Go's overhead", got)
	}
	var many []hpackField
	for i := range 8 {
		many = append(many, h2fields("x-many-"+strconv.Itoa(i), strings.Repeat("m", 1024))...)
	}
	c.request(1, "GET", "/", true, many...)
	if res := c.await(1); res.status != "431" {
		t.Errorf("8 fields of 1 KiB: %+v, want 431", res)
	}
	c.request(3, "GET", "/", true, h2fields("x-small", strings.Repeat("s", 1024))...)
	if res := c.await(3); res.status != "200" {
		t.Errorf("1 KiB header: %+v, want 200", res)
	}
	// One value longer than the whole limit is an HPACK decoding error
	// to Go's server (its string length bound): the connection ends.
	c.request(5, "GET", "/", true, h2fields("x-big", strings.Repeat("b", 8<<10))...)
	if res := c.await(5); !res.goAway || res.code != http2.ErrCodeCompression {
		t.Errorf("one 8 KiB field: %+v, want GOAWAY COMPRESSION_ERROR", res)
	}
	if n := cb.Total.Load(); n != 1 {
		t.Errorf("backend saw %d requests, want 1", n)
	}
}

// closedByPeer reads from c until the gateway closes it and fails the
// test if that takes 10 s (the limits under test are far shorter).
func closedByPeer(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: the gateway kept the connection open", what)
	}
}

// TestLimitReadHeaderTimeout: a TCP client that does not finish its TLS
// handshake, or its HTTP/1.1 header section, within read_header_timeout
// is disconnected.
func TestLimitReadHeaderTimeout(t *testing.T) {
	h := startHarness(t, ListenerConfig{Limits: Limits{ReadHeaderTimeout: 300 * time.Millisecond}}, ProtocolH1, staticUpstream("u", "/", testbackend.NewH1(t, named("u"))))
	addr := h.gw.Addrs()["test"].String()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	closedByPeer(t, raw, "no TLS handshake")

	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: 1\r\n") // never the empty line
	closedByPeer(t, c, "an unfinished header section")
}

// TestLimitIdleTimeout: a connection without a request in flight closes
// after idle_timeout, over every protocol; on HTTP/2 that includes one
// whose header block never ends (Go's server has no header timeout there).
func TestLimitIdleTimeout(t *testing.T) {
	lc := ListenerConfig{Limits: Limits{IdleTimeout: 300 * time.Millisecond}}
	up := staticUpstream("u", "/", testbackend.NewH1(t, named("u")))
	t.Run(ProtocolH1, func(t *testing.T) {
		h := startHarness(t, lc, ProtocolH1, up)
		c, err := tls.Dial("tcp", h.gw.Addrs()["test"].String(), &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
		closedByPeer(t, c, "an idle HTTP/1.1 connection")
	})
	t.Run(ProtocolH2, func(t *testing.T) {
		h := startHarness(t, lc, ProtocolH2, up)
		c := dialH2(t, h)
		c.request(1, "GET", "/", true)
		if res := c.await(1); res.status != "200" {
			t.Fatalf("request: %+v", res)
		}
		closedByPeer(t, c.c, "an idle HTTP/2 connection")

		// A header block that never ends opens no stream: the connection
		// is idle, and goes.
		c = dialH2(t, h)
		c.buf.Reset()
		for _, f := range h2fields(":method", "GET", ":scheme", "https", ":authority", "localhost", ":path", "/") {
			c.enc.WriteField(f)
		}
		if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.buf.Bytes(), EndStream: true}); err != nil {
			t.Fatal(err)
		}
		if res := c.await(1); !res.goAway && !res.closed {
			t.Errorf("an unfinished HTTP/2 header block: %+v, want the connection ended", res)
		}
	})
	t.Run(ProtocolH3, func(t *testing.T) {
		h := startHarness(t, lc, ProtocolH3, up)
		conn := dialRaw(t, h)
		select {
		case <-conn.Context().Done():
		case <-time.After(10 * time.Second):
			t.Error("an idle HTTP/3 connection stayed open")
		}
	})
}

// TestLimitMaxConnections: max_connections counts TCP and QUIC
// connections together. At the limit a QUIC attempt is refused with
// CONNECTION_REFUSED and a TCP one waits (its TLS handshake does not
// start); once a connection closes, a new one gets in.
func TestLimitMaxConnections(t *testing.T) {
	h := startHarness(t, ListenerConfig{Limits: Limits{MaxConnections: 2}}, ProtocolH1, staticUpstream("u", "/", testbackend.NewH1(t, named("u"))))
	addr := h.gw.Addrs()["test"].String()
	l := h.gw.listeners["test"]
	tlsConf := &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}}
	dialTCP := func(timeout time.Duration) (*tls.Conn, error) {
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, tlsConf)
	}
	dialQUIC := func() (*quic.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return quic.DialAddr(ctx, addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, nil)
	}

	tc, err := dialTCP(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	qc, err := dialQUIC()
	if err != nil {
		t.Fatal(err)
	}
	defer qc.CloseWithError(0, "")
	eventually(t, 5*time.Second, func() bool { return l.OpenConnections() == 2 }, "two connections counted")

	var te *quic.TransportError
	if c, err := dialQUIC(); err == nil {
		c.CloseWithError(0, "")
		t.Error("a third connection (QUIC) was admitted")
	} else if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Errorf("a third connection (QUIC): %v, want CONNECTION_REFUSED", err)
	}
	if c, err := dialTCP(500 * time.Millisecond); err == nil {
		c.Close()
		t.Error("a third connection (TCP) completed its handshake")
	}

	qc.CloseWithError(0, "")
	eventually(t, 10*time.Second, func() bool {
		c, err := dialQUIC()
		if err == nil {
			c.CloseWithError(0, "")
		}
		return err == nil
	}, "a QUIC connection once one closed")
	tc.Close()
	eventually(t, 10*time.Second, func() bool {
		c, err := dialTCP(time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "a TCP connection once one closed")
}

// TestLimitMaxConcurrentStreams: HTTP/2 advertises max_concurrent_streams
// in SETTINGS; HTTP/3 grants that many bidirectional streams.
func TestLimitMaxConcurrentStreams(t *testing.T) {
	h := startHarness(t, ListenerConfig{Limits: Limits{MaxConcurrentStreams: 3}}, ProtocolH2, staticUpstream("u", "/", testbackend.NewH1(t, named("u"))))
	if got := dialH2(t, h).settings[http2.SettingMaxConcurrentStreams]; got != 3 {
		t.Errorf("HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS %d, want 3", got)
	}
	conn := dialRaw(t, h)
	for i := range 4 {
		_, err := conn.OpenStream()
		var sl *quic.StreamLimitReachedError
		switch {
		case i < 3 && err != nil:
			t.Fatalf("HTTP/3 stream %d: %v", i, err)
		case i == 3 && !errors.As(err, &sl):
			t.Errorf("HTTP/3 stream 4: %v, want the stream limit reached", err)
		}
	}
}

// TestLimitsReload: an Apply changes the pipeline's limits (URI, body,
// max_connections) of a running listener at once.
func TestLimitsReload(t *testing.T) {
	var cb testbackend.Counter
	up := countingUpstream(t, &cb)
	h := startHarness(t, ListenerConfig{Limits: Limits{MaxURIBytes: 100, MaxRequestBodyBytes: 10}}, ProtocolH2, up)
	target := "/" + strings.Repeat("a", 150)
	if code, _, _ := h.do("GET", target, nil, 0, nil); code != 414 {
		t.Fatalf("before the reload: %d, want 414", code)
	}
	lc := ListenerConfig{Name: "test", Address: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{h.cert.TLS}},
		Limits: Limits{MaxURIBytes: 1000, MaxConnections: 5}}
	if err := h.gw.Apply(t.Context(), Config{Upstreams: []UpstreamConfig{up}, Listeners: []ListenerConfig{lc}}); err != nil {
		t.Fatal(err)
	}
	if code, _, err := h.do("GET", target, nil, 0, nil); code != 200 {
		t.Errorf("after raising max_uri_bytes: %d %v, want 200", code, err)
	}
	if code, _, err := h.do("POST", "/", strings.NewReader(strings.Repeat("x", 100)), 100, nil); code != 200 {
		t.Errorf("after removing max_request_body_bytes: %d %v, want 200", code, err)
	}
	if n := h.gw.listeners["test"].MaxConnections(); n != 5 {
		t.Errorf("max_connections after the reload: %d, want 5", n)
	}
}

package ingress

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
)

// memConn is an accepted connection whose peer sent in and hung up.
type memConn struct {
	in     *bytes.Reader
	remote net.Addr
}

func (c *memConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *memConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443} }
func (c *memConn) RemoteAddr() net.Addr             { return c.remote }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

// oneConnListener accepts c once.
type oneConnListener struct{ c net.Conn }

func (l *oneConnListener) Accept() (net.Conn, error) {
	c := l.c
	if c == nil {
		return nil, net.ErrClosed
	}
	l.c = nil
	return c, nil
}
func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443} }

// FuzzProxyProtocol feeds what a peer sends to the listener's PROXY
// protocol handling (Listener.wrapProxyProtocol, socketContext) in each
// combination of trusted/untrusted peer and required/optional mode, and
// checks the policy of ProxyProtocol against the HAProxy spec's parse of
// the same bytes: an untrusted peer's header is never believed, a trusted
// peer's missing header is refused when required, a believed header sets
// RemoteAddr and leaves the bytes after it intact, the socket peer is
// kept; nothing panics or blocks.
func FuzzProxyProtocol(f *testing.F) {
	for _, seed := range []string{
		"PROXY TCP4 203.0.113.7 127.0.0.1 4000 443\r\n\x16\x03\x01",
		"PROXY TCP6 2001:db8::7 ::1 4000 443\r\nGET",
		"PROXY UNKNOWN\r\n",
		"PROXY TCP4 not-an-address 127.0.0.1 1 2\r\n",
		"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c\xcb\x00\x71\x07\x7f\x00\x00\x01\x0f\xa0\x01\xbb\x16",
		"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00",
		"\r\n\r\n\x00\r\nQUIT\n\x21\x11\xff\xff",
		"\x16\x03\x01\x00\x05hello",
		"",
		"PROX",
	} {
		for mode := range byte(4) {
			f.Add(mode, []byte(seed))
		}
	}
	trusted, _ := clientaddr.ParsePrefixes([]string{"127.0.0.0/8"})
	metrics := observe.NewMetrics(nil)
	f.Fuzz(func(t *testing.T, mode byte, in []byte) {
		untrusted, optional := mode&1 != 0, mode&2 != 0
		socket := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 5555}
		if untrusted {
			socket = &net.TCPAddr{IP: net.IPv4(192, 0, 2, 9), Port: 5555}
		}
		l := &Listener{deps: Deps{Metrics: metrics}}
		l.client.Store(&clientConf{proxy: &ProxyProtocol{Trusted: trusted, Optional: optional}})
		ln := l.wrapProxyProtocol(&oneConnListener{c: &memConn{in: bytes.NewReader(in), remote: socket}}, time.Second)
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		ctx := socketContext(context.Background(), c) // before any read, as on the accept loop
		got, readErr := io.ReadAll(c)
		remote := c.RemoteAddr()
		r := (&http.Request{RemoteAddr: remote.String()}).WithContext(ctx)
		if s := clientaddr.Socket(r); s != socket.String() {
			t.Fatalf("socket peer %q, want %v", s, socket)
		}

		// The spec's reading of the same bytes.
		br := bufio.NewReader(bytes.NewReader(in))
		hdr, perr := proxyproto.Read(br)
		rest, _ := io.ReadAll(br)
		switch {
		case perr != nil && perr != proxyproto.ErrNoProxyProtocol:
			if readErr == nil {
				t.Fatalf("malformed header (%v) let through: read %q", perr, got)
			}
		case hdr != nil && untrusted:
			if readErr == nil {
				t.Fatalf("an untrusted peer's header was accepted (remote %v)", remote)
			}
		case hdr == nil && !untrusted && !optional:
			if readErr == nil {
				t.Fatal("a trusted peer without a header was served in required mode")
			}
		case hdr != nil:
			if readErr != nil || !bytes.Equal(got, rest) {
				t.Fatalf("after a trusted header: %q, %v; want %q", got, readErr, rest)
			}
			if hdr.Command.IsProxy() && hdr.SourceAddr != nil && remote.String() != hdr.SourceAddr.String() {
				t.Fatalf("RemoteAddr %v, header says %v", remote, hdr.SourceAddr)
			}
		default: // no header, allowed
			if readErr != nil || !bytes.Equal(got, in) || remote.String() != socket.String() {
				t.Fatalf("no header: %q %v %v; want the bytes as sent from %v", got, readErr, remote, socket)
			}
		}
		if remote == nil {
			t.Fatal("no RemoteAddr")
		}
		if ap, err := netip.ParseAddrPort(remote.String()); err != nil && remote.String() != socket.String() {
			t.Fatalf("RemoteAddr %q is neither an address nor the socket's", remote)
		} else if err == nil && untrusted && ap.String() != socket.String() {
			t.Fatalf("an untrusted peer got client address %v", ap)
		}
	})
}

// BenchmarkProxyProtocolHeader is the cost of the PROXY protocol on one
// connection: the policy, go-proxyproto's wrapper and the header's parse,
// then the first bytes after it (README "Client address").
func BenchmarkProxyProtocolHeader(b *testing.B) {
	trusted, _ := clientaddr.ParsePrefixes([]string{"127.0.0.0/8"})
	l := &Listener{}
	l.client.Store(&clientConf{proxy: &ProxyProtocol{Trusted: trusted}})
	socket := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 9), Port: 5555}
	for _, bc := range []struct {
		name string
		in   []byte
	}{
		{"v1", []byte("PROXY TCP4 203.0.113.7 127.0.0.1 4000 443\r\n\x16\x03\x01\x00\x05")},
		{"v2", []byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x0c\xcb\x00\x71\x07\x7f\x00\x00\x01\x0f\xa0\x01\xbb\x16\x03\x01\x00\x05")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 16)
			for b.Loop() {
				ln := l.wrapProxyProtocol(&oneConnListener{c: &memConn{in: bytes.NewReader(bc.in), remote: socket}}, time.Second)
				c, _ := ln.Accept()
				if _, err := c.Read(buf); err != nil {
					b.Fatal(err)
				}
				_ = c.RemoteAddr()
			}
		})
	}
}

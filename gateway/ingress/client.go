package ingress

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
)

// ProxyProtocol is a listener's PROXY protocol setting (HAProxy PROXY
// protocol spec, versions 1 and 2) on its TCP socket: a balancer in
// Trusted prefixes its connections with a header naming the client, read
// before TLS; and, with UDP set, a header on each QUIC datagram.
//
//   - Required (the default): a trusted peer must send a header; its
//     connection is closed without one. The spec asks a receiver never to
//     guess whether a header is present, and a balancer that stopped
//     sending one would otherwise make every client look like the balancer
//     (one client_ip bucket, IP rules seeing the balancer).
//   - Optional: a trusted peer may omit it (its socket address is then the
//     client's), for a migration.
//
// In both modes a header from a peer outside Trusted closes the connection
// (a client must not choose its own address), and such a peer's
// connections without a header are served with the socket address. A
// malformed header closes the connection before TLS. The header must
// arrive within the listener's Limits.ReadHeaderTimeout (default 10s, as
// go-proxyproto's ReadHeaderTimeout); the TLS handshake then has its own.
//
// UDP, when set, reads the client address of HTTP/3 behind a UDP balancer
// from a header on each QUIC datagram (UDPSPP or UDPProxyV2), with the same
// Trusted and mode: see proxyPacketConn for what is dropped. It applies to
// a UDP socket bound with it (Reconfigure warns otherwise).
type ProxyProtocol struct {
	// Trusted are the balancers allowed to send a header (CIDR prefixes).
	Trusted clientaddr.Prefixes
	// Optional lets a trusted peer omit the header (mode "optional");
	// false is mode "required".
	Optional bool
	// UDP is the header format on QUIC datagrams; UDPNone reads none
	// (HTTP/3 then sees the socket address).
	UDP UDPHeader
}

// clientConf is what settles a request's client address and whether it may
// call: swapped whole by Reconfigure.
type clientConf struct {
	proxy     *ProxyProtocol      // nil: no PROXY protocol
	forwarded clientaddr.Prefixes // Config.ForwardedTrusted
	rules     clientaddr.Rules    // Config.IPRules
}

// active reports whether requests need any per-request work.
func (c *clientConf) active() bool { return c != nil && (len(c.forwarded) > 0 || !c.rules.Empty()) }

// wrapProxyProtocol is ln reading PROXY headers as the listener's current
// setting says, per accepted connection (a reload applies to new ones);
// without a setting connections pass through untouched. timeout bounds the
// header's read.
func (l *Listener) wrapProxyProtocol(ln net.Listener, timeout time.Duration) net.Listener {
	return countingListener{l: l, Listener: &proxyproto.Listener{
		Listener:          tapListener{Listener: ln, l: l},
		ReadHeaderTimeout: timeout,
		ConnPolicy: func(o proxyproto.ConnPolicyOptions) (proxyproto.Policy, error) {
			var pp *ProxyProtocol
			if c := l.client.Load(); c != nil {
				pp = c.proxy
			}
			if pp == nil {
				return proxyproto.SKIP, nil
			}
			ap, err := netip.ParseAddrPort(o.Upstream.String())
			switch {
			case err != nil || !pp.Trusted.Contains(ap.Addr()):
				return proxyproto.REJECT, nil // a header closes it; none: the socket address
			case pp.Optional:
				return proxyproto.USE, nil
			}
			return proxyproto.REQUIRE, nil
		},
	}}
}

// countingListener hands out PROXY connections that count their refusal
// (impulse_proxy_protocol_refused).
type countingListener struct {
	*proxyproto.Listener
	l *Listener
}

func (cl countingListener) Accept() (net.Conn, error) {
	c, err := cl.Listener.Accept()
	if pc, ok := c.(*proxyproto.Conn); ok {
		return &countingConn{Conn: pc, l: cl.l}, err
	}
	return c, err
}

// countingConn is a PROXY connection that counts, once, the header error
// that closes it. The header is read by the first Read (the TLS
// handshake's), so any header error is the first error.
type countingConn struct {
	*proxyproto.Conn
	l    *Listener
	seen atomic.Bool // an error was classified
}

// NetConn is the PROXY connection under c (socketContext unwraps it).
func (c *countingConn) NetConn() net.Conn { return c.Conn }

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil && !c.seen.Swap(true) {
		reason := refusal(err)
		if t, ok := c.Conn.Raw().(*headTap); ok && reason == observe.ProxyMissing && t.started() {
			// go-proxyproto reports a signature cut short by the
			// deadline as no signature: the peer began a header.
			reason = observe.ProxyTimeout
		}
		if reason != "" && c.l.deps.Metrics != nil {
			c.l.deps.Metrics.ProxyProtocolRefused(c.l.name, observe.ProxyTCP, reason)
		}
	}
	return n, err
}

// tapListener hands out connections that keep their first bytes while the
// listener reads PROXY headers (countingConn tells a header begun from none).
type tapListener struct {
	net.Listener
	l *Listener
}

func (tl tapListener) Accept() (net.Conn, error) {
	c, err := tl.Listener.Accept()
	if err != nil {
		return c, err
	}
	if cc := tl.l.client.Load(); cc == nil || cc.proxy == nil {
		return c, nil
	}
	return &headTap{Conn: c}, nil
}

// headTap keeps the first bytes read from a connection: as many as the
// longest PROXY signature (v2's 12).
type headTap struct {
	net.Conn
	mu   sync.Mutex
	head []byte
}

func (t *headTap) Read(b []byte) (int, error) {
	n, err := t.Conn.Read(b)
	t.mu.Lock()
	if k := len(proxyproto.SIGV2) - len(t.head); k > 0 {
		t.head = append(t.head, b[:min(n, k)]...)
	}
	t.mu.Unlock()
	return n, err
}

// started reports whether the bytes read so far begin a PROXY signature
// (v1 "PROXY" or v2's 12 bytes): a header was begun, not left out.
func (t *headTap) started() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.head
	return len(h) > 0 && (bytes.HasPrefix(proxyproto.SIGV1, h[:min(len(h), len(proxyproto.SIGV1))]) ||
		bytes.HasPrefix(proxyproto.SIGV2, h))
}

// refusal is the impulse_proxy_protocol_refused reason of a read error,
// "" for one that is not the header's: go-proxyproto's own errors all start
// "proxyproto: ", and an error after the header (a reset, the deadline
// net/http sets to abort a read) is the connection's. Nothing at all within
// the timeout is ErrNoProxyProtocol (missing; countingConn makes it a
// timeout when a signature was begun); a v2 header cut short and stalled,
// a timeout inside one; a v1 header not sent at once is refused by
// go-proxyproto as malformed without waiting.
func refusal(err error) string {
	switch {
	case !strings.HasPrefix(err.Error(), "proxyproto: "):
		return ""
	case errors.Is(err, proxyproto.ErrSuperfluousProxyHeader):
		return observe.ProxyUntrusted
	case errors.Is(err, proxyproto.ErrNoProxyProtocol):
		return observe.ProxyMissing
	case errors.Is(err, os.ErrDeadlineExceeded):
		return observe.ProxyTimeout
	}
	return observe.ProxyMalformed
}

// socketContext is the TCP server's ConnContext: a connection whose PROXY
// header names a client carries its socket peer (the balancer) for the
// access log. It must not block: RemoteAddr on a PROXY connection waits for
// the header, and this runs on the accept loop.
func socketContext(ctx context.Context, c net.Conn) context.Context {
	for {
		switch v := c.(type) {
		case *proxyproto.Conn:
			return clientaddr.WithSocket(ctx, v.Raw().RemoteAddr().String())
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return ctx
		}
	}
}

// settleClient is the handler entry's client address step, once per
// request and the same for every protocol: from a peer in the listener's
// trusted forwarders, the address their headers report becomes
// r.RemoteAddr (the peer kept as clientaddr.Peer); then the listener's IP
// rules refuse a client they do not allow (403 ip_denied), or answer 425
// to one in early data they would allow (its address is not validated),
// unless the
// adapter refused r already.
func (c *clientConf) settleClient(r *http.Request, refused answer.Answer) (*http.Request, answer.Answer) {
	if len(c.forwarded) > 0 {
		if peer, err := netip.ParseAddrPort(r.RemoteAddr); err == nil && c.forwarded.Contains(peer.Addr()) {
			if client, ok := clientaddr.FromHeaders(r.Header, c.forwarded); ok && client.Addr() != peer.Addr().Unmap() {
				hop := r.RemoteAddr
				r = r.WithContext(clientaddr.WithPeer(r.Context(), hop))
				r.RemoteAddr = client.String()
			}
		}
	}
	if refused.Status == 0 && !c.rules.Empty() {
		switch {
		case !c.rules.Allows(clientaddr.Of(r)):
			refused = answer.IPDenied
		case InEarlyData(r):
			// An address in 0-RTT data is not validated yet (RFC 9000
			// §8.1): it cannot be what lets a request in. 425: the client
			// sends it again after the handshake (RFC 8470 §5.2).
			refused = answer.TooEarly
		}
	}
	return r, refused
}

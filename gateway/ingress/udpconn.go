package ingress

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/observe"
)

// proxyPacketConn is a listener's UDP socket as its quic.Transport sees it
// when proxy_protocol.udp is set (ProxyProtocol.UDP): ReadFrom takes the
// header off each datagram and hands quic-go the payload from the client
// the header names (a *udpClientAddr), WriteTo sends quic-go's packets for
// such a client to the balancer socket it last came through, behind the
// header that balancer expects (SPP: the client's own; v2: none).
//
// Which datagrams reach quic-go, by the listener's current setting (a
// reload applies to the next datagram):
//
//   - from a peer in Trusted with a valid header: from the header's client
//     (a v2 LOCAL header: from the peer itself);
//   - from a trusted peer without a header: from the client the last
//     header from that same address and port named, within the flow idle
//     time (udpFlows); else, in mode optional, from the peer itself;
//     in mode required it is dropped (reason missing);
//   - from a peer outside Trusted: without a header from the peer itself
//     (a direct client); with one dropped (untrusted: a client must not
//     choose its own address);
//   - a header that opens with the format's signature and is not valid:
//     dropped (malformed).
//
// Each drop counts in impulse_proxy_protocol_refused{transport="udp"}.
//
// It is not a *net.UDPConn and does not offer ReadMsgUDP / WriteMsgUDP, so
// quic-go reads and writes one datagram per system call through it: no
// recvmmsg batches, no GSO, no ECN (sys_conn.go's basicConn). It does
// pass SetReadBuffer, SetWriteBuffer and SyscallConn through, so the
// socket still gets its buffers and the Don't Fragment bit (path MTU
// discovery, RFC 8899).
type proxyPacketConn struct {
	pc    net.PacketConn
	l     *Listener
	flows *udpFlows

	rmu  sync.Mutex // one reader: guards rbuf and v2
	rbuf []byte     // a whole datagram, header and payload
	v2   *v2Reader
}

// newProxyPacketConn wraps pc (the listener's UDP socket); flows expire
// after idle without a datagram.
func newProxyPacketConn(pc net.PacketConn, l *Listener, idle time.Duration) *proxyPacketConn {
	return &proxyPacketConn{pc: pc, l: l, flows: newUDPFlows(idle, maxUDPFlows), rbuf: make([]byte, 1<<16), v2: newV2Reader()}
}

// ReadFrom returns the next datagram quic-go may see, its header taken
// off, with its client's address (copy semantics: a payload longer than p
// is cut, as a UDP read cuts). Errors: the socket's.
func (c *proxyPacketConn) ReadFrom(p []byte) (int, net.Addr, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		n, from, err := c.pc.ReadFrom(c.rbuf)
		if err != nil {
			return 0, from, err
		}
		if addr, payload, ok := c.admit(c.rbuf[:n], from, time.Now()); ok {
			return copy(p, payload), addr, nil
		}
	}
}

// admit applies the listener's setting to datagram b from the socket peer
// from: the address quic-go gets it from and its payload, or ok false when
// it is dropped (and counted). One caller at a time (c.v2).
func (c *proxyPacketConn) admit(b []byte, from net.Addr, now time.Time) (_ net.Addr, _ []byte, ok bool) {
	var pp *ProxyProtocol
	if conf := c.l.client.Load(); conf != nil {
		pp = conf.proxy
	}
	ua, _ := from.(*net.UDPAddr)
	if pp == nil || pp.UDP == UDPNone || ua == nil {
		return from, b, true
	}
	peer := ua.AddrPort()
	trusted := pp.Trusted.Contains(peer.Addr())
	h, err := parseDatagram(pp.UDP, b, c.v2)
	switch {
	case h.present && !trusted:
		return c.refuse(observe.ProxyUntrusted)
	case err != nil:
		return c.refuse(observe.ProxyMalformed)
	case h.present && !h.client.IsValid(): // v2 LOCAL: the balancer's own
		return from, b[h.size:], true
	case h.present:
		r := udpRoute{via: peer, addr: ua, f: pp.UDP, spp: h.spp}
		if c.flows.seen(h.client, r, now) {
			c.l.deps.Log.Warn("UDP flow table full: clients beyond it are served, but replies no longer follow a balancer change and datagrams without a header are not matched to them",
				"listener", c.l.name, "max_clients", c.flows.max)
		}
		return &udpClientAddr{client: h.client, route: r}, b[h.size:], true
	case !trusted:
		return from, b, true
	}
	if a, ok := c.flows.via(peer, now); ok {
		return a, b, true
	}
	if pp.Optional {
		return from, b, true
	}
	return c.refuse(observe.ProxyMissing)
}

// refuse counts a dropped datagram.
func (c *proxyPacketConn) refuse(reason string) (net.Addr, []byte, bool) {
	if m := c.l.deps.Metrics; m != nil {
		m.ProxyProtocolRefused(c.l.name, observe.ProxyUDP, reason)
	}
	return nil, nil, false
}

// sppBufs hold SPP replies being written (header and packet).
var sppBufs = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// WriteTo sends p to addr: to a proxied client through its balancer (the
// flow table's latest route, else the one addr came with), behind the SPP
// header for an SPP route; to any other address as it is. It reports
// len(p) written. Errors: the socket's.
func (c *proxyPacketConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	a, ok := addr.(*udpClientAddr)
	if !ok {
		return c.pc.WriteTo(p, addr)
	}
	r := c.flows.route(a)
	if r.f != UDPSPP {
		if _, err := c.pc.WriteTo(p, r.addr); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	bp := sppBufs.Get().(*[]byte)
	*bp = sppReply(*bp, &r.spp, p)
	_, err := c.pc.WriteTo(*bp, r.addr)
	sppBufs.Put(bp)
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close closes the socket.
func (c *proxyPacketConn) Close() error { return c.pc.Close() }

// LocalAddr is the socket's address.
func (c *proxyPacketConn) LocalAddr() net.Addr { return c.pc.LocalAddr() }

// SetDeadline sets the socket's deadlines.
func (c *proxyPacketConn) SetDeadline(t time.Time) error { return c.pc.SetDeadline(t) }

// SetReadDeadline sets the socket's read deadline.
func (c *proxyPacketConn) SetReadDeadline(t time.Time) error { return c.pc.SetReadDeadline(t) }

// SetWriteDeadline sets the socket's write deadline.
func (c *proxyPacketConn) SetWriteDeadline(t time.Time) error { return c.pc.SetWriteDeadline(t) }

var errNotUDPConn = errors.New("the listener's socket is not a UDP socket")

// SetReadBuffer sets the socket's receive buffer (quic-go asks for 7 MiB).
func (c *proxyPacketConn) SetReadBuffer(n int) error {
	if s, ok := c.pc.(interface{ SetReadBuffer(int) error }); ok {
		return s.SetReadBuffer(n)
	}
	return errNotUDPConn
}

// SetWriteBuffer sets the socket's send buffer.
func (c *proxyPacketConn) SetWriteBuffer(n int) error {
	if s, ok := c.pc.(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(n)
	}
	return errNotUDPConn
}

// SyscallConn is the socket's, for quic-go's socket options (buffer sizes,
// Don't Fragment).
func (c *proxyPacketConn) SyscallConn() (syscall.RawConn, error) {
	if s, ok := c.pc.(syscall.Conn); ok {
		return s.SyscallConn()
	}
	return nil, errNotUDPConn
}

// socketPeer is the balancer socket a proxied QUIC connection's client
// came through ("" for a direct client), for the access log's peer.
func socketPeer(remote net.Addr) string {
	a, ok := remote.(*udpClientAddr)
	if !ok {
		return ""
	}
	v := a.route.via
	return netip.AddrPortFrom(v.Addr().Unmap(), v.Port()).String()
}

// warnUDPHeader logs when an Apply set proxy_protocol.udp for a running
// UDP socket bound without it: quic-go is handed its socket once, and
// only a socket bound with the setting reads headers (a restart, a new
// address, h3 turned on). A socket bound with it passes datagrams through
// untouched when it is turned off.
func (l *Listener) warnUDPHeader() {
	c := l.client.Load()
	if l.quic == nil || l.quic.proxied != nil || c == nil || c.proxy == nil || c.proxy.UDP == UDPNone {
		return
	}
	l.deps.Log.Warn("proxy_protocol udp applies to a UDP socket bound from now on (a restart, a new address, h3 turned on); the running one keeps reading no header, so HTTP/3 still sees the balancer's address",
		"listener", l.name, "udp", string(c.proxy.UDP))
}

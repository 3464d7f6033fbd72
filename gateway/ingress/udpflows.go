package ingress

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// udpRoute is the way back to a client behind a UDP balancer: the
// balancer's socket address the client's datagrams came from, and for SPP
// the header they carried (sent back unchanged).
type udpRoute struct {
	via  netip.AddrPort
	addr *net.UDPAddr // via, as the socket reported it (written to)
	f    UDPHeader
	spp  [sppLen]byte
}

// udpClientAddr is the net.Addr a proxied datagram is handed to quic-go
// with: the client the header named (String is its address, so quic-go
// keys the connection by it and http3 sets r.RemoteAddr to it), and the
// route of that datagram, the way back when the flow table no longer
// holds the client. quic-go compares addresses that are not *net.UDPAddr
// by String: a client whose address changes (a NAT rebinding in front of
// the balancer) is a path change it validates (RFC 9000 §9), while a
// change of balancer socket for the same client is not, and replies follow
// the flow table.
type udpClientAddr struct {
	client netip.AddrPort
	route  udpRoute
}

// Network is "udp".
func (a *udpClientAddr) Network() string { return "udp" }

// String is the client's ip:port ("[v6]:port").
func (a *udpClientAddr) String() string { return a.client.String() }

// udpFlow is one client seen through a balancer.
type udpFlow struct {
	client netip.AddrPort
	route  udpRoute
	seen   time.Time // its last datagram
}

// udpFlows is the flow table of a listener's proxied UDP socket, guarded by
// its mutex: by client, the route of the client's latest datagram (replies
// follow the balancer socket the client last came through); by balancer
// socket, the client whose header it carried last, so a datagram without a
// header from that socket belongs to that client (a balancer that sends
// the header on a flow's first datagram only, as Cloudflare Spectrum does
// with PROXY v2). A flow expires idle after it has had no datagram for
// idle (the listener's QUIC idle timeouts: its connection is gone by
// then); expired flows are swept at most every idle/4, on the read path,
// so no goroutine owns the table. At most max clients are held: beyond,
// a new client's datagrams are still served (their address carries their
// route) but the flow is not kept.
type udpFlows struct {
	mu        sync.Mutex
	clients   map[netip.AddrPort]*udpFlow
	vias      map[netip.AddrPort]*udpFlow
	max       int
	idle      time.Duration
	nextSweep time.Time
	full      bool // a client was not kept since the last sweep
}

// maxUDPFlows bounds a flow table (about 200 bytes a client). A variable
// for tests.
var maxUDPFlows = 1 << 18

func newUDPFlows(idle time.Duration, max int) *udpFlows {
	return &udpFlows{clients: map[netip.AddrPort]*udpFlow{}, vias: map[netip.AddrPort]*udpFlow{}, max: max, idle: idle}
}

// sweepLocked drops the flows idle for longer than t.idle, when a sweep is
// due at now. t.mu is held.
func (t *udpFlows) sweepLocked(now time.Time) {
	if now.Before(t.nextSweep) {
		return
	}
	t.nextSweep = now.Add(t.idle / 4)
	t.full = false
	for c, f := range t.clients {
		if now.Sub(f.seen) > t.idle {
			delete(t.clients, c)
			if t.vias[f.route.via] == f {
				delete(t.vias, f.route.via)
			}
		}
	}
}

// seen records a datagram of client through route r at now. warn reports
// the first client not kept, the table being full, since the last sweep
// (the caller's cue to log it, at most once per sweep interval).
func (t *udpFlows) seen(client netip.AddrPort, r udpRoute, now time.Time) (warn bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(now)
	f := t.clients[client]
	switch {
	case f == nil && len(t.clients) >= t.max:
		warn, t.full = !t.full, true
		return warn
	case f == nil:
		f = &udpFlow{client: client}
		t.clients[client] = f
	case f.route.via != r.via && t.vias[f.route.via] == f:
		delete(t.vias, f.route.via)
	}
	f.route, f.seen = r, now
	t.vias[r.via] = f
	return false
}

// via is the client a header-less datagram from balancer socket v belongs
// to, and its route, when a header from v named one within the idle time;
// the flow counts as seen at now.
func (t *udpFlows) via(v netip.AddrPort, now time.Time) (*udpClientAddr, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(now)
	f := t.vias[v]
	if f == nil || now.Sub(f.seen) > t.idle {
		return nil, false
	}
	f.seen = now
	return &udpClientAddr{client: f.client, route: f.route}, true
}

// route is the way back to client: its latest flow's, or a's own.
func (t *udpFlows) route(a *udpClientAddr) udpRoute {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.clients[a.client]; f != nil {
		return f.route
	}
	return a.route
}

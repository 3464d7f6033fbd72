package ingress

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	proxyproto "github.com/pires/go-proxyproto"

	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
)

// sppHeader is a Simple Proxy Protocol header (Cloudflare's layout,
// written here from the documentation): magic 0x56EC, client and proxy
// addresses as 16 bytes (IPv4-mapped for IPv4), client and proxy ports.
func sppHeader(client, proxy netip.AddrPort) []byte {
	b := binary.BigEndian.AppendUint16(nil, 0x56EC)
	c, p := client.Addr().As16(), proxy.Addr().As16()
	b = append(append(b, c[:]...), p[:]...)
	b = binary.BigEndian.AppendUint16(b, client.Port())
	return binary.BigEndian.AppendUint16(b, proxy.Port())
}

// proxyV2Datagram is a PROXY v2 header (proxy-protocol.txt §2.2, written
// by go-proxyproto) for UDP from client to dst, then payload.
func proxyV2Datagram(t testing.TB, client, dst netip.AddrPort, payload []byte) []byte {
	t.Helper()
	tp := proxyproto.UDPv4
	if client.Addr().Is6() {
		tp = proxyproto.UDPv6
	}
	h := &proxyproto.Header{Version: 2, Command: proxyproto.PROXY, TransportProtocol: tp,
		SourceAddr: net.UDPAddrFromAddrPort(client), DestinationAddr: net.UDPAddrFromAddrPort(dst)}
	b, err := h.FormatUDPDatagram(payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	ap      = netip.MustParseAddrPort
	client4 = ap("203.0.113.7:4000")
	client6 = ap("[2001:db8::7]:6000")
	edge    = ap("198.51.100.1:443")
)

func TestParseDatagram(t *testing.T) {
	payload := []byte("\x40quic")
	v2local := append(append([]byte{}, proxyV2Sig...), 0x20, 0x00, 0x00, 0x00)
	v2stream := proxyV2Datagram(t, client4, edge, payload)
	v2stream[13] = 0x11 // AF_INET, STREAM
	for _, tc := range []struct {
		name    string
		f       UDPHeader
		in      []byte
		present bool
		err     bool
		client  netip.AddrPort // zero: none named
		rest    []byte
	}{
		{"spp IPv4", UDPSPP, append(sppHeader(client4, edge), payload...), true, false, client4, payload},
		{"spp IPv6", UDPSPP, append(sppHeader(client6, edge), payload...), true, false, client6, payload},
		{"spp header only", UDPSPP, sppHeader(client4, edge), true, false, client4, nil},
		{"spp cut short", UDPSPP, sppHeader(client4, edge)[:37], true, true, netip.AddrPort{}, nil},
		{"spp magic alone", UDPSPP, []byte{0x56, 0xEC}, true, true, netip.AddrPort{}, nil},
		{"spp none", UDPSPP, payload, false, false, netip.AddrPort{}, payload},
		{"spp, a v2 header", UDPSPP, proxyV2Datagram(t, client4, edge, payload), false, false, netip.AddrPort{}, nil},
		{"v2 IPv4", UDPProxyV2, proxyV2Datagram(t, client4, edge, payload), true, false, client4, payload},
		{"v2 IPv6", UDPProxyV2, proxyV2Datagram(t, client6, ap("[2001:db8::1]:443"), payload), true, false, client6, payload},
		{"v2 LOCAL", UDPProxyV2, append(v2local, payload...), true, false, netip.AddrPort{}, payload},
		{"v2 STREAM", UDPProxyV2, v2stream, true, true, netip.AddrPort{}, nil},
		{"v2 signature alone", UDPProxyV2, proxyV2Sig, true, true, netip.AddrPort{}, nil},
		{"v2 length past the end", UDPProxyV2, proxyV2Datagram(t, client4, edge, nil)[:20], true, true, netip.AddrPort{}, nil},
		{"v2 none", UDPProxyV2, payload, false, false, netip.AddrPort{}, payload},
		{"v2, a v1 line", UDPProxyV2, []byte("PROXY UDP4 203.0.113.7 198.51.100.1 4000 443\r\n"), false, false, netip.AddrPort{}, nil},
		{"v2, an SPP header", UDPProxyV2, sppHeader(client4, edge), false, false, netip.AddrPort{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := parseDatagram(tc.f, tc.in, newV2Reader())
			if h.present != tc.present || (err != nil) != tc.err || h.client != tc.client {
				t.Fatalf("present %v, err %v, client %v; want %v, %v, %v", h.present, err, h.client, tc.present, tc.err, tc.client)
			}
			if err == nil && tc.rest != nil && !bytes.Equal(tc.in[h.size:], tc.rest) {
				t.Errorf("payload %q, want %q", tc.in[h.size:], tc.rest)
			}
			if tc.f == UDPSPP && h.present && err == nil && !bytes.Equal(h.spp[:], tc.in[:sppLen]) {
				t.Errorf("kept header %x, want %x", h.spp, tc.in[:sppLen])
			}
		})
	}
}

// TestSPPConnIDs: connection IDs of a proxied listener are 4 bytes and never
// open with 0xEC (a short-header packet would then start like SPP's magic).
func TestSPPConnIDs(t *testing.T) {
	var g sppConnIDs
	seen := map[string]bool{}
	for range 5000 {
		id, err := g.GenerateConnectionID()
		if err != nil || id.Len() != g.ConnectionIDLen() || id.Bytes()[0] == 0xEC {
			t.Fatalf("%v %v", id, err)
		}
		seen[string(id.Bytes())] = true
	}
	if len(seen) < 4990 {
		t.Errorf("%d distinct IDs of 5000", len(seen))
	}
}

// proxiedListener is a Listener (no sockets) whose PROXY setting is pp,
// with metrics, for admit.
func proxiedListener(t *testing.T, pp *ProxyProtocol) *Listener {
	t.Helper()
	l := &Listener{name: "test", deps: Deps{Metrics: observe.NewMetrics(nil), Log: hclog.NewNullLogger()}}
	l.client.Store(&clientConf{proxy: pp})
	return l
}

func udpPeer(s string) *net.UDPAddr { return net.UDPAddrFromAddrPort(ap(s)) }

// TestProxyPacketConnAdmit: which datagrams reach quic-go, from whom, and
// what each drop counts (proxyPacketConn's table), in both modes and
// formats.
func TestProxyPacketConnAdmit(t *testing.T) {
	trusted, _ := clientaddr.ParsePrefixes([]string{"10.0.0.0/8"})
	quic := []byte("\x40quic")
	balancer, other, direct := udpPeer("10.0.0.5:7000"), udpPeer("10.0.0.6:7001"), udpPeer("192.0.2.9:5555")
	for _, f := range []UDPHeader{UDPSPP, UDPProxyV2} {
		withHeader := func(c netip.AddrPort) []byte {
			if f == UDPSPP {
				return append(sppHeader(c, edge), quic...)
			}
			return proxyV2Datagram(t, c, edge, quic)
		}
		malformed := append([]byte{}, withHeader(client4)[:16]...)
		for _, optional := range []bool{false, true} {
			t.Run(string(f)+map[bool]string{false: " required", true: " optional"}[optional], func(t *testing.T) {
				l := proxiedListener(t, &ProxyProtocol{Trusted: trusted, Optional: optional, UDP: f})
				c := newProxyPacketConn(nil, l, time.Minute)
				now := time.Now()
				for _, tc := range []struct {
					name string
					in   []byte
					from *net.UDPAddr
					want string // the address quic-go gets it from; "" dropped
				}{
					{"trusted, no header, no flow", quic, other, map[bool]string{false: "", true: other.String()}[optional]},
					{"trusted, header", withHeader(client4), balancer, client4.String()},
					{"trusted, no header after one", quic, balancer, client4.String()},
					{"trusted, IPv6 header", withHeader(client6), balancer, client6.String()},
					{"the socket's flow follows its last header", quic, balancer, client6.String()},
					{"trusted, malformed", malformed, balancer, ""},
					{"untrusted, header", withHeader(client4), direct, ""},
					{"untrusted, malformed header", malformed, direct, ""},
					{"untrusted, none", quic, direct, direct.String()},
				} {
					addr, payload, ok := c.admit(tc.in, tc.from, now)
					got := ""
					if ok {
						got = addr.String()
						if !bytes.Equal(payload, quic) {
							t.Errorf("%s: payload %q", tc.name, payload)
						}
					}
					if got != tc.want {
						t.Errorf("%s: from %q, want %q", tc.name, got, tc.want)
					}
				}
				want := map[string]uint64{observe.ProxyMalformed: 1, observe.ProxyUntrusted: 2}
				if !optional {
					want[observe.ProxyMissing] = 1
				}
				for _, r := range []string{observe.ProxyMissing, observe.ProxyUntrusted, observe.ProxyMalformed, observe.ProxyTimeout} {
					if n := l.deps.Metrics.ProxyProtocolRefusals("test", observe.ProxyUDP, r); n != want[r] {
						t.Errorf("refused %s: %d, want %d", r, n, want[r])
					}
				}
				// Turned off by a reload: datagrams pass as they are.
				l.client.Store(&clientConf{})
				if addr, payload, ok := c.admit(withHeader(client4), direct, now); !ok || addr != net.Addr(direct) || !bytes.Equal(payload, withHeader(client4)) {
					t.Errorf("udp off: %v %q %v", addr, payload, ok)
				}
			})
		}
	}
}

// len is the number of clients t holds.
func (t *udpFlows) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.clients)
}

// TestUDPFlows: the table keeps each client's latest route and each
// balancer socket's latest client, expires them after idle, and holds at
// most max clients (a client beyond is not kept, and the first such one is
// reported once per sweep).
func TestUDPFlows(t *testing.T) {
	now := time.Unix(1000, 0)
	ft := newUDPFlows(time.Minute, 2)
	r1 := udpRoute{via: ap("10.0.0.5:7000"), addr: udpPeer("10.0.0.5:7000"), f: UDPSPP}
	r2 := udpRoute{via: ap("10.0.0.6:7000"), addr: udpPeer("10.0.0.6:7000"), f: UDPSPP}
	if ft.seen(client4, r1, now) {
		t.Fatal("warned with room")
	}
	if a, ok := ft.via(r1.via, now); !ok || a.client != client4 {
		t.Fatalf("via r1: %v %v", a, ok)
	}
	ft.seen(client4, r2, now) // the balancer moved the client to another socket
	if _, ok := ft.via(r1.via, now); ok {
		t.Error("the old socket still stands for the client")
	}
	if got := ft.route(&udpClientAddr{client: client4, route: r1}); got.via != r2.via {
		t.Errorf("replies go to %v, want the latest %v", got.via, r2.via)
	}
	ft.seen(client6, r1, now)
	other := ap("192.0.2.1:1")
	if !ft.seen(other, r1, now) || ft.seen(ap("192.0.2.2:1"), r1, now) || ft.len() != 2 {
		t.Errorf("full table: len %d; want 2 and one warning", ft.len())
	}
	if got := ft.route(&udpClientAddr{client: other, route: r2}); got.via != r2.via {
		t.Errorf("a client not kept is answered through %v, want its own route", got.via)
	}
	later := now.Add(time.Minute + time.Second)
	if _, ok := ft.via(r2.via, later); ok {
		t.Error("an idle flow still matched")
	}
	if ft.len() != 0 {
		t.Errorf("%d flows after the idle time", ft.len())
	}
	if ft.seen(other, r1, later) || ft.len() != 1 {
		t.Error("no room after expiry")
	}
}

// TestProxyPacketConnReplies: over real sockets, a reply to an SPP client
// goes to the balancer socket behind the client's header as received; a
// v2 client's goes bare; a direct peer's as it is.
func TestProxyPacketConnReplies(t *testing.T) {
	trusted, _ := clientaddr.ParsePrefixes([]string{"127.0.0.0/8"})
	for _, f := range []UDPHeader{UDPSPP, UDPProxyV2} {
		t.Run(string(f), func(t *testing.T) {
			sock, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer sock.Close()
			bal, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer bal.Close()
			c := newProxyPacketConn(sock, proxiedListener(t, &ProxyProtocol{Trusted: trusted, UDP: f}), time.Minute)
			var in []byte
			if f == UDPSPP {
				in = append(sppHeader(client4, edge), "ping"...)
			} else {
				in = proxyV2Datagram(t, client4, edge, []byte("ping"))
			}
			if _, err := bal.WriteTo(in, sock.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1500)
			n, from, err := c.ReadFrom(buf)
			if err != nil || string(buf[:n]) != "ping" || from.String() != client4.String() {
				t.Fatalf("read %q from %v, %v", buf[:n], from, err)
			}
			if peer := socketPeer(from); peer != bal.LocalAddr().String() {
				t.Errorf("socket peer %q, want the balancer %v", peer, bal.LocalAddr())
			}
			if n, err := c.WriteTo([]byte("pong"), from); err != nil || n != 4 {
				t.Fatalf("write: %d %v", n, err)
			}
			bal.SetReadDeadline(time.Now().Add(10 * time.Second))
			n, _, err = bal.ReadFrom(buf)
			if err != nil {
				t.Fatal(err)
			}
			want := []byte("pong")
			if f == UDPSPP {
				want = append(sppHeader(client4, edge), want...)
			}
			if !bytes.Equal(buf[:n], want) {
				t.Errorf("the balancer got %x, want %x", buf[:n], want)
			}
		})
	}
}

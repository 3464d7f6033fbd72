package ingress

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"

	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
)

// recordingConn is a net.PacketConn that keeps what is written to it.
type recordingConn struct {
	net.PacketConn // nil: any other method panics
	wrote          []byte
	to             net.Addr
}

func (c *recordingConn) WriteTo(p []byte, to net.Addr) (int, error) {
	c.wrote, c.to = append([]byte(nil), p...), to
	return len(p), nil
}

// discardConn is a net.PacketConn whose writes go nowhere.
type discardConn struct{ net.PacketConn }

func (discardConn) WriteTo(p []byte, _ net.Addr) (int, error) { return len(p), nil }

// refHeader is the reading of a datagram's header the fuzz target checks
// against: SPP from Cloudflare's documentation, written here; PROXY v2 by
// go-proxyproto's stream reader (Read) rather than its datagram helper.
type refHeader struct {
	present, bad bool
	client       netip.AddrPort // invalid: none named (v2 LOCAL)
	size         int
}

func refParse(f UDPHeader, in []byte) refHeader {
	switch f {
	case UDPSPP:
		if len(in) < 2 || in[0] != 0x56 || in[1] != 0xEC {
			return refHeader{}
		}
		if len(in) < 38 {
			return refHeader{present: true, bad: true}
		}
		a := netip.AddrFrom16([16]byte(in[2:18]))
		if a.Is4In6() {
			a = netip.AddrFrom4(a.As4())
		}
		return refHeader{present: true, client: netip.AddrPortFrom(a, binary.BigEndian.Uint16(in[34:])), size: 38}
	}
	if len(in) < 12 || string(in[:12]) != "\r\n\r\n\x00\r\nQUIT\n" {
		return refHeader{}
	}
	br := bufio.NewReader(bytes.NewReader(in))
	h, err := proxyproto.Read(br)
	if err != nil {
		return refHeader{present: true, bad: true}
	}
	rest, _ := io.ReadAll(br)
	r := refHeader{present: true, size: len(in) - len(rest)}
	switch {
	case h.Command == proxyproto.LOCAL:
	case h.TransportProtocol == proxyproto.UDPv4 || h.TransportProtocol == proxyproto.UDPv6:
		r.client = h.SourceAddr.(*net.UDPAddr).AddrPort()
		r.client = netip.AddrPortFrom(r.client.Addr().Unmap(), r.client.Port())
	default:
		r.bad = true // STREAM or UNIX: not a UDP datagram's
	}
	return r
}

// FuzzUDPHeader feeds any datagram to a listener reading SPP or PROXY v2
// headers on UDP (proxyPacketConn.admit, then WriteTo for a reply), from a
// trusted or an untrusted peer, in required and optional mode, and checks
// it against refParse of the same bytes: an untrusted peer's header is
// never believed (dropped); a malformed one is dropped; a valid one hands
// quic-go the payload after it from the client it names (never an
// IPv4-mapped address), or from the peer for a LOCAL one; a datagram
// without a header passes unchanged from the peer, except from a trusted
// peer in required mode (dropped); what quic-go gets is always a suffix of
// the datagram; a reply to a proxied client goes to the peer behind the
// very SPP header received, bare for v2; nothing panics.
func FuzzUDPHeader(f *testing.F) {
	quic := []byte("\x40\x01\x02\x03\x04quic")
	v2 := func(c netip.AddrPort) []byte {
		tp := proxyproto.UDPv4
		if c.Addr().Is6() {
			tp = proxyproto.UDPv6
		}
		b, _ := (&proxyproto.Header{Version: 2, Command: proxyproto.PROXY, TransportProtocol: tp,
			SourceAddr: net.UDPAddrFromAddrPort(c), DestinationAddr: net.UDPAddrFromAddrPort(c)}).FormatUDPDatagram(quic)
		return b
	}
	for _, seed := range [][]byte{
		append(sppHeader(client4, edge), quic...),
		append(sppHeader(client6, edge), quic...),
		sppHeader(client4, edge)[:20],
		v2(client4), v2(client6),
		append(append([]byte{}, proxyV2Sig...), 0x20, 0x00, 0x00, 0x00, 'x'),
		append(append([]byte{}, proxyV2Sig...), 0x21, 0x12, 0x00, 0x0c, 1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2),
		append(append([]byte{}, proxyV2Sig...), 0x21, 0x11, 0xff, 0xff),
		quic, {0x56}, {0x56, 0xEC}, {},
	} {
		for mode := range byte(8) {
			f.Add(mode, seed)
		}
	}
	trusted, _ := clientaddr.ParsePrefixes([]string{"10.0.0.0/8"})
	f.Fuzz(func(t *testing.T, mode byte, in []byte) {
		untrusted, optional := mode&1 != 0, mode&2 != 0
		format := UDPSPP
		if mode&4 != 0 {
			format = UDPProxyV2
		}
		peer := udpPeer("10.0.0.5:7000")
		if untrusted {
			peer = udpPeer("192.0.2.9:5555")
		}
		rc := &recordingConn{}
		c := newProxyPacketConn(rc, proxiedListener(t, &ProxyProtocol{Trusted: trusted, Optional: optional, UDP: format}), time.Minute)
		datagram := append([]byte(nil), in...)
		addr, payload, ok := c.admit(datagram, peer, time.Now())
		ref := refParse(format, in)

		switch {
		case ref.present && untrusted:
			if ok {
				t.Fatalf("an untrusted peer's header was believed: from %v", addr)
			}
		case ref.bad:
			if ok {
				t.Fatalf("a malformed header let through from %v", addr)
			}
		case ref.present:
			want := peer.String()
			if ref.client.IsValid() {
				want = ref.client.String()
			}
			if !ok || addr.String() != want || !bytes.Equal(payload, in[ref.size:]) {
				t.Fatalf("header: %v %q %v; want from %s, %q", addr, payload, ok, want, in[ref.size:])
			}
		case !untrusted && !optional:
			if ok {
				t.Fatal("a trusted peer without a header was served in required mode")
			}
		default:
			if !ok || addr != net.Addr(peer) || !bytes.Equal(payload, in) {
				t.Fatalf("no header: %v %q %v; want the datagram from the peer", addr, payload, ok)
			}
		}
		if !ok {
			return
		}
		if !bytes.HasSuffix(in, payload) {
			t.Fatalf("payload %q is not the datagram's end", payload)
		}
		ca, proxied := addr.(*udpClientAddr)
		if !proxied {
			return
		}
		if a := ca.client.Addr(); a.Is4In6() || a.Zone() != "" {
			t.Fatalf("client address %v", a)
		}
		if _, err := c.WriteTo([]byte("reply"), addr); err != nil {
			t.Fatal(err)
		}
		want := []byte("reply")
		if format == UDPSPP {
			want = append(append([]byte(nil), in[:sppLen]...), want...)
		}
		if !bytes.Equal(rc.wrote, want) || rc.to.String() != peer.String() {
			t.Fatalf("reply %x to %v, want %x to %v", rc.wrote, rc.to, want, peer)
		}
	})
}

// BenchmarkUDPHeader is the cost of a proxied datagram's header on the
// read path (policy, parse, flow table) and of an SPP reply's on the write
// path, without the socket (README "Client address").
func BenchmarkUDPHeader(b *testing.B) {
	trusted, _ := clientaddr.ParsePrefixes([]string{"10.0.0.0/8"})
	payload := bytes.Repeat([]byte{0x40}, 1200)
	peer := udpPeer("10.0.0.5:7000")
	for _, bc := range []struct {
		name string
		f    UDPHeader
		in   []byte
	}{
		{"spp", UDPSPP, append(sppHeader(client4, edge), payload...)},
		{"v2", UDPProxyV2, proxyV2Datagram(b, client4, edge, payload)},
	} {
		c := newProxyPacketConn(discardConn{}, proxiedListener(&testing.T{}, &ProxyProtocol{Trusted: trusted, UDP: bc.f}), time.Minute)
		b.Run(bc.name+"/read", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, ok := c.admit(bc.in, peer, time.Now()); !ok {
					b.Fatal("dropped")
				}
			}
		})
		addr, _, _ := c.admit(bc.in, peer, time.Now())
		b.Run(bc.name+"/write", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.WriteTo(payload, addr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

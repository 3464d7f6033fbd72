package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/ingress"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
)

// udpForwarder is a UDP balancer written for the test (case A02): it takes
// clients' datagrams on its own address and, per client, forwards them to
// the gateway from a socket of its own (one flow per client, as Cloudflare
// Spectrum does), each behind a header naming the client as claim says;
// replies from the gateway go back to the client with the header taken
// off. SPP: every datagram carries the header, and every reply must carry
// the one the client's datagrams did (Cloudflare's documentation); v2:
// every datagram carries one (or with firstOnly the flow's first only, as
// Spectrum sends PROXY v2 over UDP), replies none.
type udpForwarder struct {
	t         *testing.T
	front     net.PacketConn
	gw        net.Addr
	format    ingress.UDPHeader
	firstOnly bool
	claim     func(n int) netip.AddrPort // the address of the n-th client (0, 1, ...)

	mu    sync.Mutex
	flows map[string]*fwdFlow // by client address
	wg    sync.WaitGroup

	badReplies atomic.Int64 // SPP replies without the client's header
}

// fwdFlow is one client's flow through the forwarder.
type fwdFlow struct {
	client net.Addr
	header []byte // what its datagrams are sent behind
	up     net.PacketConn
	sent   atomic.Bool
}

// newUDPForwarder forwards to gw until the test ends.
func newUDPForwarder(t *testing.T, gw net.Addr, format ingress.UDPHeader, firstOnly bool, claim func(int) netip.AddrPort) *udpForwarder {
	t.Helper()
	front, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &udpForwarder{t: t, front: front, gw: gw, format: format, firstOnly: firstOnly, claim: claim, flows: map[string]*fwdFlow{}}
	f.wg.Go(f.serveFront)
	t.Cleanup(f.close)
	return f
}

// addr is where clients send.
func (f *udpForwarder) addr() string { return f.front.LocalAddr().String() }

func (f *udpForwarder) close() {
	f.front.Close()
	f.mu.Lock()
	for _, fl := range f.flows {
		fl.up.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// header is the header naming client, to the gateway's address.
func (f *udpForwarder) header(client netip.AddrPort) []byte {
	dst := f.gw.(*net.UDPAddr).AddrPort()
	if f.format == ingress.UDPSPP {
		b := binary.BigEndian.AppendUint16(nil, 0x56EC)
		c, p := client.Addr().As16(), dst.Addr().As16()
		b = append(append(b, c[:]...), p[:]...)
		b = binary.BigEndian.AppendUint16(b, client.Port())
		return binary.BigEndian.AppendUint16(b, dst.Port())
	}
	tp := proxyproto.UDPv4
	if client.Addr().Is6() {
		tp = proxyproto.UDPv6
		dst = netip.AddrPortFrom(netip.IPv6Loopback(), dst.Port())
	}
	h := &proxyproto.Header{Version: 2, Command: proxyproto.PROXY, TransportProtocol: tp,
		SourceAddr: net.UDPAddrFromAddrPort(client), DestinationAddr: net.UDPAddrFromAddrPort(dst)}
	b, err := h.Format()
	if err != nil {
		panic(err)
	}
	return b
}

func (f *udpForwarder) serveFront() {
	buf := make([]byte, 1<<16)
	for {
		n, from, err := f.front.ReadFrom(buf)
		if err != nil {
			return
		}
		fl := f.flow(from)
		if fl == nil {
			return
		}
		out := buf[:n]
		if !(f.firstOnly && fl.sent.Swap(true)) {
			out = append(append([]byte{}, fl.header...), out...)
		}
		_, _ = fl.up.WriteTo(out, f.gw)
	}
}

// flow is client's flow, opened on its first datagram (nil: closing).
func (f *udpForwarder) flow(client net.Addr) *fwdFlow {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl := f.flows[client.String()]; fl != nil {
		return fl
	}
	up, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil
	}
	fl := &fwdFlow{client: client, header: f.header(f.claim(len(f.flows))), up: up}
	f.flows[client.String()] = fl
	f.wg.Go(func() { f.serveBack(fl) })
	return fl
}

func (f *udpForwarder) serveBack(fl *fwdFlow) {
	buf := make([]byte, 1<<16)
	for {
		n, _, err := fl.up.ReadFrom(buf)
		if err != nil {
			return
		}
		out := buf[:n]
		if f.format == ingress.UDPSPP {
			if !bytes.HasPrefix(out, fl.header) {
				f.badReplies.Add(1)
				continue
			}
			out = out[len(fl.header):]
		}
		_, _ = f.front.WriteTo(out, fl.client)
	}
}

// h3Via is an HTTP/3 client trusting h's certificate, giving up a
// handshake after handshake (getVia says where it connects).
func h3Via(t *testing.T, h *harness, handshake time.Duration) *http.Client {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"},
		QUICConfig: &quic.Config{HandshakeIdleTimeout: handshake}}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr}
}

// udpHarness is a gateway serving h3 whose listener reads UDP headers as
// pp says, with a client_ip rate limit of one request per client, logging
// to the returned sink; its backend echoes X-Forwarded-For.
func udpHarness(t *testing.T, pp *ingress.ProxyProtocol) (*harness, *logSink) {
	sink := &logSink{}
	lc := ListenerConfig{ProxyProtocol: pp, Protocols: []string{ProtocolH3},
		RateLimit: &ratelimit.Config{RequestsPerSecond: 0.001, Burst: 1}}
	cfg := Config{Upstreams: []UpstreamConfig{staticUpstream("u", "/", xffEcho(t, "a"))}, AccessLog: &accesslog.Config{Writer: sink}}
	return startHarnessConfig(t, cfg, lc, ProtocolH3), sink
}

// getVia is a GET of / through addr on c: status and body, or the error.
func getVia(c *http.Client, addr string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+addr+"/", nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestA02UDPProxyHeaders: HTTP/3 through a UDP balancer that adds SPP or
// PROXY v2 headers (a forwarder written for the test) is logged with the
// client the header names (the balancer's socket as peer), gets that
// client's X-Forwarded-For and its own client_ip rate-limit bucket, and SPP
// replies carry the client's header; a header from an untrusted balancer
// is dropped (counted untrusted) while a direct client from there is
// served; a trusted peer without a header is dropped in required mode
// (missing) and served as itself in optional mode.
func TestA02UDPProxyHeaders(t *testing.T) {
	claims := []netip.AddrPort{netip.MustParseAddrPort("203.0.113.7:4000"), netip.MustParseAddrPort("[2001:db8::7]:6000")}
	claim := func(n int) netip.AddrPort { return claims[n%len(claims)] }
	trusted := prefixes(t, "127.0.0.0/8")
	for _, tc := range []struct {
		name      string
		format    ingress.UDPHeader
		firstOnly bool
	}{
		{"spp", ingress.UDPSPP, false},
		{"v2", ingress.UDPProxyV2, false},
		{"v2 on a flow's first datagram", ingress.UDPProxyV2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, sink := udpHarness(t, &ingress.ProxyProtocol{Trusted: trusted, UDP: tc.format})
			fwd := newUDPForwarder(t, h.gw.Addrs()["test"], tc.format, tc.firstOnly, claim)
			for i, want := range claims {
				c := h3Via(t, h, 10*time.Second)
				status, body, err := getVia(c, fwd.addr())
				if err != nil || status != 200 || body != want.Addr().String() {
					t.Fatalf("client %d: %d %q %v; want 200 with X-Forwarded-For %s", i, status, body, err, want.Addr())
				}
				line := sink.wait(t, 2*i+1)[2*i]
				if line["client_address"] != want.String() || line["protocol"] != ProtocolH3 {
					t.Errorf("client %d: client_address %v over %v, want %s over h3", i, line["client_address"], line["protocol"], want)
				}
				if p, _ := line["peer"].(string); !strings.HasPrefix(p, "127.0.0.1:") || p == line["client_address"] {
					t.Errorf("client %d: peer %q, want the forwarder's socket", i, p)
				}
				// client_ip rate limit: this client's one request is spent;
				// the next client has its own.
				if status, _, err := getVia(c, fwd.addr()); err != nil || status != 429 {
					t.Errorf("client %d again: %d %v, want 429", i, status, err)
				}
				sink.wait(t, 2*i+2)
			}
			if n := fwd.badReplies.Load(); n != 0 {
				t.Errorf("%d SPP replies without the client's header", n)
			}
			wantUDPRefusals(t, h, nil)
		})
	}
	t.Run("untrusted balancer", func(t *testing.T) {
		for _, format := range []ingress.UDPHeader{ingress.UDPSPP, ingress.UDPProxyV2} {
			h, sink := udpHarness(t, &ingress.ProxyProtocol{Trusted: prefixes(t, "10.0.0.0/8"), UDP: format})
			fwd := newUDPForwarder(t, h.gw.Addrs()["test"], format, false, claim)
			if status, body, err := getVia(h3Via(t, h, time.Second), fwd.addr()); err == nil {
				t.Errorf("%s: a header from an untrusted balancer was served: %d %q", format, status, body)
			}
			waitUDPRefusals(t, h, func(got map[string]uint64) bool { return got["untrusted"] > 0 && len(got) == 1 })
			// A direct client from the same host is served as itself.
			if status, body, err := getVia(h3Via(t, h, 10*time.Second), strings.TrimPrefix(h.base, "https://")); err != nil || status != 200 || body != "127.0.0.1" {
				t.Errorf("%s: direct: %d %q %v", format, status, body, err)
			}
			if ca, _ := sink.wait(t, 1)[0]["client_address"].(string); !strings.HasPrefix(ca, "127.0.0.1:") {
				t.Errorf("%s: client_address %q, want the socket's", format, ca)
			}
		}
	})
	t.Run("trusted peer without a header", func(t *testing.T) {
		h, _ := udpHarness(t, &ingress.ProxyProtocol{Trusted: trusted, UDP: ingress.UDPSPP})
		if status, _, err := getVia(h3Via(t, h, time.Second), strings.TrimPrefix(h.base, "https://")); err == nil {
			t.Errorf("required: served (%d) without a header", status)
		}
		waitUDPRefusals(t, h, func(got map[string]uint64) bool { return got["missing"] > 0 && len(got) == 1 })

		h, _ = udpHarness(t, &ingress.ProxyProtocol{Trusted: trusted, Optional: true, UDP: ingress.UDPProxyV2})
		if status, body, err := getVia(h3Via(t, h, 10*time.Second), strings.TrimPrefix(h.base, "https://")); err != nil || status != 200 || body != "127.0.0.1" {
			t.Errorf("optional: %d %q %v; want 200 with the socket address", status, body, err)
		}
		wantUDPRefusals(t, h, nil)
	})
}

// udpRefusals is impulse_proxy_protocol_refused{transport="udp"} of h's
// listener by reason (reasons at 0 left out).
func udpRefusals(h *harness) map[string]uint64 {
	out := map[string]uint64{}
	for _, r := range []string{observe.ProxyMissing, observe.ProxyUntrusted, observe.ProxyMalformed, observe.ProxyTimeout} {
		if n := h.gw.obs.Metrics.ProxyProtocolRefusals("test", observe.ProxyUDP, r); n > 0 {
			out[r] = n
		}
	}
	return out
}

// waitUDPRefusals waits until ok holds of h's UDP refusals.
func waitUDPRefusals(t *testing.T, h *harness, ok func(map[string]uint64) bool) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return ok(udpRefusals(h)) }, fmt.Sprintf("UDP refusals %v", udpRefusals(h)))
}

// wantUDPRefusals checks h's UDP refusals are want (nil: none).
func wantUDPRefusals(t *testing.T, h *harness, want map[string]uint64) {
	t.Helper()
	if got := udpRefusals(h); !maps.Equal(got, want) && (len(got) != 0 || len(want) != 0) {
		t.Errorf("UDP refusals %v, want %v", got, want)
	}
}

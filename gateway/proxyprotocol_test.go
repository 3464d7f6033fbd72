package gateway

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/ingress"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
)

// proxyV1 is a PROXY protocol v1 header (HAProxy PROXY protocol spec §2.1)
// naming src as the client.
func proxyV1(src netip.AddrPort) []byte {
	fam := "TCP4"
	if src.Addr().Is6() {
		fam = "TCP6"
	}
	dst := "127.0.0.1"
	if src.Addr().Is6() {
		dst = "::1"
	}
	return []byte("PROXY " + fam + " " + src.Addr().String() + " " + dst + " " + strconv.Itoa(int(src.Port())) + " 443\r\n")
}

// proxyV2 is a PROXY protocol v2 header (spec §2.2), written byte by byte:
// the signature, version 2 / PROXY, TCP over IPv4 or IPv6, the addresses
// and ports.
func proxyV2(src netip.AddrPort) []byte {
	b := []byte("\r\n\r\n\x00\r\nQUIT\n")
	b = append(b, 0x21) // version 2, command PROXY
	if src.Addr().Is4() {
		b = append(b, 0x11) // AF_INET, STREAM
		b = binary.BigEndian.AppendUint16(b, 12)
		a := src.Addr().As4()
		b = append(b, a[:]...)
		b = append(b, 127, 0, 0, 1)
	} else {
		b = append(b, 0x21) // AF_INET6, STREAM
		b = binary.BigEndian.AppendUint16(b, 36)
		a := src.Addr().As16()
		b = append(b, a[:]...)
		b = append(b, netip.IPv6Loopback().AsSlice()...)
	}
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, 443)
}

// proxyClient is a client for proto (h1 or h2) whose connections start
// with header() (nil: none) before TLS.
func proxyClient(t *testing.T, h *harness, proto string, header func() []byte) *http.Client {
	tr := clientTransport(proto, &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"}).(*http.Transport)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := new(net.Dialer).DialContext(ctx, network, addr)
		if err != nil || header == nil {
			return c, err
		}
		if _, err := c.Write(header()); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	}
	tr.DisableKeepAlives = true // one header per request: a new connection each time
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// proxyHarness is a gateway whose listener reads PROXY headers as pp says,
// with a client_ip rate limit of one request per client, logging to the
// returned sink; its backend echoes X-Forwarded-For.
func proxyHarness(t *testing.T, proto string, pp *ingress.ProxyProtocol) (*harness, *logSink) {
	sink := &logSink{}
	lc := ListenerConfig{ProxyProtocol: pp, RateLimit: &ratelimit.Config{RequestsPerSecond: 0.001, Burst: 1},
		Limits: Limits{ReadHeaderTimeout: 2 * time.Second}}
	cfg := Config{Upstreams: []UpstreamConfig{staticUpstream("u", "/", xffEcho(t, "a"))}, AccessLog: &accesslog.Config{Writer: sink}}
	return startHarnessConfig(t, cfg, lc, proto), sink
}

// closedBeforeTLS dials h, writes raw and reports whether the gateway closed
// the connection without a byte of TLS (a ServerHello would mean the
// header was let through).
func closedBeforeTLS(t *testing.T, h *harness, raw []byte) bool {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.base, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(raw); err != nil {
		return true
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection stayed open after %q", raw)
	}
	return len(b) == 0
}

// TestA01ProxyProtocol: PROXY v1 and v2 headers from a trusted balancer
// set the client address of the access log, client_ip rate limits and
// X-Forwarded-For (the balancer is logged as peer); a missing header is
// refused in required mode and served with the socket address in
// optional mode; a header from an untrusted peer and a malformed header
// close the connection before TLS (HAProxy PROXY protocol spec;
// traefik proxyProtocol.trustedIPs).
func TestA01ProxyProtocol(t *testing.T) {
	forProtocols(t, tcpProtocols, func(t *testing.T, proto string) {
		trusted := prefixes(t, "127.0.0.0/8")
		t.Run("required", func(t *testing.T) {
			h, sink := proxyHarness(t, proto, &ingress.ProxyProtocol{Trusted: trusted})
			lines := 0
			for _, tc := range []struct {
				name   string
				header []byte
				client string
			}{
				{"v1", proxyV1(netip.MustParseAddrPort("203.0.113.7:4000")), "203.0.113.7:4000"},
				{"v2", proxyV2(netip.MustParseAddrPort("198.51.100.9:5000")), "198.51.100.9:5000"},
				{"v2 IPv6", proxyV2(netip.MustParseAddrPort("[2001:db8::7]:6000")), "[2001:db8::7]:6000"},
			} {
				c := proxyClient(t, h, proto, func() []byte { return tc.header })
				got := h.send(c, "/", "")
				host, _, _ := net.SplitHostPort(tc.client)
				if got.status != 200 || got.body != host {
					t.Fatalf("%s: %d, X-Forwarded-For %q; want 200, %q", tc.name, got.status, got.body, host)
				}
				lines++
				line := sink.wait(t, lines)[lines-1]
				if line["client_address"] != tc.client {
					t.Errorf("%s: client_address %v, want %s", tc.name, line["client_address"], tc.client)
				}
				if p, _ := line["peer"].(string); !strings.HasPrefix(p, "127.0.0.1:") {
					t.Errorf("%s: peer %q, want the balancer's 127.0.0.1", tc.name, p)
				}
				// client_ip rate limit: this client's one request is spent.
				if again := h.send(c, "/", ""); again.status != 429 {
					t.Errorf("%s: the same client again got %d, want 429", tc.name, again.status)
				}
				lines++
			}
			if _, err := proxyClient(t, h, proto, nil).Get(h.base + "/"); err == nil {
				t.Error("a trusted peer without a header was served")
			}
			if !closedBeforeTLS(t, h, []byte("PROXY TCP4 not-an-address 127.0.0.1 1 2\r\n")) {
				t.Error("a malformed v1 header got TLS bytes back")
			}
			if !closedBeforeTLS(t, h, append([]byte("\r\n\r\n\x00\r\nQUIT\n\x21\x11\xff\xff"), make([]byte, 12)...)) {
				t.Error("a malformed v2 header got TLS bytes back")
			}
			wantRefusals(t, h, map[string]uint64{"missing": 1, "malformed": 2})
		})
		t.Run("optional", func(t *testing.T) {
			h, sink := proxyHarness(t, proto, &ingress.ProxyProtocol{Trusted: trusted, Optional: true})
			if got := h.send(proxyClient(t, h, proto, nil), "/", ""); got.status != 200 || got.body != "127.0.0.1" {
				t.Fatalf("no header: %d %q, want 200 with the socket address", got.status, got.body)
			}
			if ca, _ := sink.wait(t, 1)[0]["client_address"].(string); !strings.HasPrefix(ca, "127.0.0.1:") {
				t.Errorf("client_address %q, want the socket's", ca)
			}
			c := proxyClient(t, h, proto, func() []byte { return proxyV1(netip.MustParseAddrPort("203.0.113.7:4000")) })
			if got := h.send(c, "/", ""); got.status != 200 || got.body != "203.0.113.7" {
				t.Errorf("with a header: %d %q", got.status, got.body)
			}
		})
		t.Run("untrusted peer", func(t *testing.T) {
			for _, optional := range []bool{false, true} {
				h, _ := proxyHarness(t, proto, &ingress.ProxyProtocol{Trusted: prefixes(t, "10.0.0.0/8"), Optional: optional})
				if !closedBeforeTLS(t, h, proxyV1(netip.MustParseAddrPort("203.0.113.7:4000"))) {
					t.Errorf("optional=%v: a header from an untrusted peer got TLS bytes back", optional)
				}
				wantRefusals(t, h, map[string]uint64{"untrusted": 1})
				if got := h.send(proxyClient(t, h, proto, nil), "/", ""); got.status != 200 || got.body != "127.0.0.1" {
					t.Errorf("optional=%v: no header from an untrusted peer: %d %q, want 200 with its socket address", optional, got.status, got.body)
				}
			}
		})
		t.Run("slow header", func(t *testing.T) {
			// A connection that sends nothing, or half a v2 header (or
			// of its signature), is
			// closed at read_header_timeout (2s here), not held; half a
			// v1 header at once (go-proxyproto wants it in one read).
			h, _ := proxyHarness(t, proto, &ingress.ProxyProtocol{Trusted: trusted})
			for _, tc := range []struct {
				raw    string
				reason string
			}{
				{"", "missing"},
				{"\r\n\r\n\x00\r\nQUIT\n\x21\x11", "timeout"},
				{"\r\n\r\n\x00", "timeout"}, // the signature itself cut short
				{"PROXY TCP4 203.0.113.7", "malformed"},
			} {
				start := time.Now()
				if !closedBeforeTLS(t, h, []byte(tc.raw)) {
					t.Errorf("%q: a stalled header got TLS bytes back", tc.raw)
				}
				if d := time.Since(start); d > 8*time.Second {
					t.Errorf("%q: closed after %v", tc.raw, d)
				}
			}
			wantRefusals(t, h, map[string]uint64{"missing": 1, "timeout": 2, "malformed": 1})
		})
	})
}

// TestA01ProxyProtocolCurl: curl's --haproxy-protocol (v1, naming its own
// address) is accepted; curl without it is refused in required mode.
func TestA01ProxyProtocolCurl(t *testing.T) {
	curl := tool(t, "curl", "curl")
	for _, proto := range tcpProtocols {
		t.Run(proto, func(t *testing.T) {
			h, sink := proxyHarness(t, proto, &ingress.ProxyProtocol{Trusted: prefixes(t, "127.0.0.0/8")})
			ca := filepath.Join(t.TempDir(), "ca.pem")
			if err := os.WriteFile(ca, h.cert.CertPEM, 0o600); err != nil {
				t.Fatal(err)
			}
			flag := map[string]string{ProtocolH1: "--http1.1", ProtocolH2: "--http2"}[proto]
			if out := run(t, curl, "-sS", "--cacert", ca, flag, "--haproxy-protocol", h.base+"/"); out != "127.0.0.1" {
				t.Errorf("curl got %q, want the X-Forwarded-For 127.0.0.1", out)
			}
			line := sink.wait(t, 1)[0]
			if line["protocol"] != proto || line["status"] != float64(200) {
				t.Errorf("logged %v %v", line["protocol"], line["status"])
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if out, err := exec.CommandContext(ctx, curl, "-sS", "--cacert", ca, flag, h.base+"/").CombinedOutput(); err == nil {
				t.Errorf("curl without --haproxy-protocol was served: %s", out)
			}
		})
	}
}

// wantRefusals waits until impulse_proxy_protocol_refused of h's listener
// holds want (by reason; the server counts after the client saw the close),
// and checks the reasons not named are 0.
func wantRefusals(t *testing.T, h *harness, want map[string]uint64) {
	t.Helper()
	m := h.gw.obs.Metrics
	got := func() map[string]uint64 {
		out := map[string]uint64{}
		for _, r := range []string{"missing", "untrusted", "malformed", "timeout"} {
			if n := m.ProxyProtocolRefusals("test", observe.ProxyTCP, r); n > 0 {
				out[r] = n
			}
		}
		return out
	}
	var last map[string]uint64
	eventually(t, 5*time.Second, func() bool { last = got(); return maps.Equal(last, want) },
		fmt.Sprintf("impulse_proxy_protocol_refused %v (at the call), want %v", got(), want))
}

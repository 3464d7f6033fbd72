package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/balance"
	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// xffEcho is a backend answering with the X-Forwarded-For it got, and its
// own name in X-Backend.
func xffEcho(t *testing.T, name string) *httptest.Server {
	return testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	}))
}

// prefixes parses CIDRs or fails the test.
func prefixes(t *testing.T, cidrs ...string) clientaddr.Prefixes {
	t.Helper()
	p, err := clientaddr.ParsePrefixes(cidrs)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// clientResult is one request's status, x-impulse-error, body and
// serving backend.
type clientResult struct {
	status           int
	reason, body, be string
}

// send makes a GET on h's client with the given X-Forwarded-For ("" for
// none).
func (h *harness) send(c *http.Client, path, xff string) clientResult {
	h.t.Helper()
	if c == nil {
		c = h.client
	}
	req, _ := http.NewRequest("GET", h.base+path, nil)
	if xff != "" {
		req.Header.Set("X-Forwarded-For", xff)
	}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("GET %s (X-Forwarded-For %q): %v", path, xff, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return clientResult{resp.StatusCode, resp.Header.Get("x-impulse-error"), string(b), resp.Header.Get("X-Backend")}
}

// TestA03TrustedForwarders: from a trusted peer the client is the
// right-most untrusted X-Forwarded-For entry, and that address is what the
// access log, client_ip rate limits and client_ip hashing see; from an
// untrusted peer the header is not believed. Either way the peer is
// appended to what is forwarded (RFC 7239 §5.2; Caddy trusted_proxies).
func TestA03TrustedForwarders(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		up := staticUpstream("u", "/", xffEcho(t, "a"))
		for _, tc := range []struct {
			name     string
			trusted  []string
			client   string // access log client_address
			appended string // what the backend gets
		}{
			{"trusted peer", []string{"127.0.0.1/32"}, "10.1.1.1:0", "6.6.6.6, 10.1.1.1, 127.0.0.1"},
			{"untrusted peer", []string{"10.0.0.0/8"}, "127.0.0.1:", "6.6.6.6, 10.1.1.1, 127.0.0.1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				sink := &logSink{}
				lc := ListenerConfig{ForwardedTrusted: prefixes(t, tc.trusted...),
					RateLimit: &ratelimit.Config{RequestsPerSecond: 0.001, Burst: 1}}
				h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{up}, AccessLog: &accesslog.Config{Writer: sink}}, lc, proto)
				got := h.send(nil, "/", "6.6.6.6, 10.1.1.1")
				if got.status != 200 || got.body != tc.appended {
					t.Fatalf("status %d, backend got X-Forwarded-For %q; want 200, %q", got.status, got.body, tc.appended)
				}
				line := sink.wait(t, 1)[0]
				if ca, _ := line["client_address"].(string); !strings.HasPrefix(ca, tc.client) {
					t.Errorf("client_address %q, want %s…", ca, tc.client)
				}
				if p, _ := line["peer"].(string); !strings.HasPrefix(p, "127.0.0.1:") {
					t.Errorf("peer %q, want the socket's 127.0.0.1", p)
				}
				// client_ip rate limit, one request per client: another
				// client behind the same forwarder has its own bucket only
				// when the header is believed.
				other := h.send(nil, "/", "6.6.6.6, 10.9.9.9")
				if want := map[bool]int{true: 200, false: 429}[tc.trusted[0] == "127.0.0.1/32"]; other.status != want {
					t.Errorf("another forwarded client: %d, want %d", other.status, want)
				}
				if again := h.send(nil, "/", "6.6.6.6, 10.1.1.1"); again.status != 429 {
					t.Errorf("the same client again: %d, want 429", again.status)
				}
			})
		}
	})
}

// TestA03ClientIPHashing: hash_on client_ip hashes the forwarded client,
// not the forwarder: clients behind one trusted forwarder spread over the
// backends, each always reaching the same one.
func TestA03ClientIPHashing(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		up := staticUpstream("u", "/", xffEcho(t, "a"), xffEcho(t, "b"))
		up.LoadBalancing, up.HashOn = balance.ConsistentHash, "client_ip"
		h := startHarness(t, ListenerConfig{ForwardedTrusted: prefixes(t, "127.0.0.1/32")}, proto, up)
		seen := map[string]string{}
		for i := range 24 {
			ip := fmt.Sprintf("192.0.2.%d", i+1)
			got := h.send(nil, "/", ip)
			if got.status != 200 {
				t.Fatalf("%s: %d", ip, got.status)
			}
			seen[ip] = got.be
		}
		backends := map[string]bool{}
		for ip, be := range seen {
			backends[be] = true
			if again := h.send(nil, "/", ip); again.be != be {
				t.Errorf("%s moved from %s to %s", ip, be, again.be)
			}
		}
		if len(backends) != 2 {
			t.Errorf("24 clients all hashed to %v: the forwarder's address was hashed", backends)
		}
	})
}

// boundClient is a client for proto whose connections come from local
// (127.0.0.2, say): TCP through the dialer's LocalAddr, QUIC through a UDP
// socket bound there.
func boundClient(t *testing.T, h *harness, proto, local string) *http.Client {
	tc := &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"}
	if proto == ProtocolH3 {
		var mu sync.Mutex
		var trs []*quic.Transport
		tr := &http3.Transport{TLSClientConfig: tc, Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			pc, err := net.ListenPacket("udp", local+":0")
			if err != nil {
				return nil, err
			}
			qt := &quic.Transport{Conn: pc}
			mu.Lock()
			trs = append(trs, qt)
			mu.Unlock()
			ua, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, err
			}
			return qt.DialEarly(ctx, ua, tlsCfg, cfg)
		}}
		t.Cleanup(func() {
			tr.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, qt := range trs {
				qt.Close()
			}
		})
		return &http.Client{Transport: tr}
	}
	tr := clientTransport(proto, tc).(*http.Transport)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	tr.DialContext = d.DialContext
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestA04IPRules: ip_deny on the listener refuses 127.0.0.2 (its socket
// address, or the address a trusted forwarder reports), ip_allow on one
// route admits only 10.0.0.0/8 there; denied requests get 403 ip_denied
// and never reach a backend (Traefik IPAllowList).
func TestA04IPRules(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		var hits sync.Map
		echo := func(name string) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				hits.Store(name+" "+r.Header.Get("X-Forwarded-For"), true)
				w.Header().Set("X-Backend", name)
			}
		}
		open := staticUpstream("open", "/", testbackend.NewH1(t, echo("open")))
		internal := staticUpstream("internal", "/internal", testbackend.NewH1(t, echo("internal")))
		internal.Routes[0].IPRules = clientaddr.Rules{Allow: prefixes(t, "10.0.0.0/8")}
		lc := ListenerConfig{ForwardedTrusted: prefixes(t, "127.0.0.1/32"),
			IPRules: clientaddr.Rules{Deny: prefixes(t, "127.0.0.2/32")}}
		h := startHarness(t, lc, proto, open, internal)
		for _, tc := range []struct {
			name, path, xff string
			status          int
		}{
			{"socket peer allowed", "/", "", 200},
			{"forwarded client denied by the listener", "/", "127.0.0.2", 403},
			{"forwarded client allowed by the route", "/internal/x", "10.1.1.1", 200},
			{"forwarded client outside the route's allow list", "/internal/x", "192.0.2.1", 403},
			{"socket peer outside the route's allow list", "/internal/x", "", 403},
			{"deny wins over the route's allow", "/internal/x", "6.6.6.6, 127.0.0.2", 403},
		} {
			got := h.send(nil, tc.path, tc.xff)
			if got.status != tc.status || tc.status == 403 && got.reason != "ip_denied" {
				t.Errorf("%s: %d %q, want %d", tc.name, got.status, got.reason, tc.status)
			}
		}
		// 127.0.0.2 itself, not trusted as a forwarder: its socket address.
		c := boundClient(t, h, proto, "127.0.0.2")
		if got := h.send(c, "/", "10.1.1.1"); got.status != 403 || got.reason != "ip_denied" {
			t.Errorf("from 127.0.0.2: %d %q, want 403 ip_denied", got.status, got.reason)
		}
		if _, ok := hits.Load("internal 192.0.2.1, 127.0.0.1"); ok {
			t.Error("a denied request reached the backend")
		}
	})
}

// TestA03TraceClientAddress: the server span's client.address is the
// client a trusted forwarder named, as the access log's.
func TestA03TraceClientAddress(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		tp, exp := newTestTracing(t)
		lc := ListenerConfig{ForwardedTrusted: prefixes(t, "127.0.0.1/32")}
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{staticUpstream("u", "/", xffEcho(t, "a"))}, TracerProvider: tp}, lc, proto)
		if got := h.send(nil, "/", "6.6.6.6, 10.1.1.1"); got.status != 200 {
			t.Fatalf("status %d", got.status)
		}
		waitServerSpan(t, exp)
		server, _ := spansOf(t, exp)
		wantAttr(t, server, "client.address", "10.1.1.1")
	})
}

// TestA04IPRulesReload: a reload switches a running listener's and a
// route's IP rules at once, its sockets kept.
func TestA04IPRulesReload(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		up := staticUpstream("u", "/", xffEcho(t, "a"))
		h := startHarness(t, ListenerConfig{}, proto, up)
		apply := func(listener, route clientaddr.Rules) {
			t.Helper()
			lc := h.listenerConfig()
			lc.IPRules = listener
			u := up
			u.Routes = []RouteConfig{{PathPrefix: "/", IPRules: route}}
			if err := h.gw.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{u}, Listeners: []ListenerConfig{lc}}); err != nil {
				t.Fatal(err)
			}
		}
		self := prefixes(t, "127.0.0.1/32")
		for _, tc := range []struct {
			name            string
			listener, route clientaddr.Rules
			status          int
		}{
			{"listener denies", clientaddr.Rules{Deny: self}, clientaddr.Rules{}, 403},
			{"none", clientaddr.Rules{}, clientaddr.Rules{}, 200},
			{"route allows others only", clientaddr.Rules{}, clientaddr.Rules{Allow: prefixes(t, "10.0.0.0/8")}, 403},
			{"route allows", clientaddr.Rules{}, clientaddr.Rules{Allow: self}, 200},
		} {
			apply(tc.listener, tc.route)
			if got := h.send(nil, "/", ""); got.status != tc.status {
				t.Errorf("%s: %d %q, want %d", tc.name, got.status, got.reason, tc.status)
			}
		}
	})
}

package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

func TestEarlyDataAction(t *testing.T) {
	for _, c := range []struct {
		method string
		early  bool
		want   earlyAction
	}{
		{"GET", false, earlyNone},
		{"POST", false, earlyNone},
		{"GET", true, earlyForward},
		{"HEAD", true, earlyForward},
		{"OPTIONS", true, earlyForward},
		{"TRACE", true, earlyForward},
		{"POST", true, earlyReject},
		{"PUT", true, earlyReject},
		{"DELETE", true, earlyReject}, // idempotent, not safe: a replay still has an effect
		{"PATCH", true, earlyReject},
		{"get", true, earlyReject}, // methods are case-sensitive (RFC 9110 §9.1)
		{"PROPFIND", true, earlyReject},
	} {
		if got := earlyDataAction(c.method, c.early); got != c.want {
			t.Errorf("earlyDataAction(%q, %v) = %d, want %d", c.method, c.early, got, c.want)
		}
	}
}

// TestEarlyDataNotNominatedAway: a Connection field naming Early-Data does
// not remove it (RFC 8470 §5.1).
func TestEarlyDataNotNominatedAway(t *testing.T) {
	h := http.Header{"Connection": {"early-data, x-hop"}, "Early-Data": {"1"}, "X-Hop": {"a"}}
	wire.RemoveHopHeaders(h)
	if h.Get("Early-Data") != "1" || h.Get("X-Hop") != "" || h.Get("Connection") != "" {
		t.Fatalf("after removeHopHeaders: %v", h)
	}
}

// TestI03EarlyData: with early_data off the tickets do not offer 0-RTT and a
// resumed client's requests all arrive after the handshake; with it on, a
// resumed client's 0-RTT GET reaches the backend with "Early-Data: 1", a
// 0-RTT POST is answered 425 too_early and never reaches the backend, and a
// backend's own 425 passes through. RFC 8470 §5; RFC 9001 §4.6; RFC 9114
// §10.9.
func TestI03EarlyData(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		be := &earlyBackend{}
		h := startHarness(t, ListenerConfig{EarlyData: true}, ProtocolH3, staticUpstream("u", "/", testbackend.NewH1(t, be)))
		cache := newTicketCache()
		tc := &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", ClientSessionCache: cache}
		if !primeTicket(t, h, tc, cache) {
			t.Fatal("with early_data on, the session ticket does not offer early data")
		}
		relay := newUDPRelay(t, h.gw.Addrs()["test"].String(), true)
		conns := make(chan *quic.Conn, 1)
		tr := &http3.Transport{TLSClientConfig: tc, Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			c, err := quic.DialAddrEarly(ctx, relay.addr(), tlsCfg, cfg)
			if err == nil {
				conns <- c
			}
			return c, err
		}}
		defer tr.Close()
		get0RTT := func(path string) <-chan roundTripResult {
			req, _ := http.NewRequest(http3.MethodGet0RTT, h.base+path, nil)
			return goRoundTrip(tr, req)
		}
		early := get0RTT("/early")
		conn := await(t, conns, "the 0-RTT dial")
		backend425 := get0RTT("/backend-425")
		post := sendRaw(t, conn, rawPost("/early-post", "data"))
		eventually(t, 10*time.Second, func() bool {
			return be.saw("GET /early 1", "GET /backend-425 1") && requestsCountedOver(h.gw, ProtocolH3, "u", "4xx", answer.TooEarly.Reason) == 1
		}, "the gateway to handle the three early requests")
		select {
		case <-conn.HandshakeComplete():
			t.Fatal("the handshake completed while the relay held the server's flight")
		default:
		}
		relay.release()

		if r := await(t, early, "GET /early"); r.err != nil || r.resp.StatusCode != 200 || r.body != "ok" {
			t.Errorf("0-RTT GET: %+v", r)
		}
		if r := await(t, backend425, "GET /backend-425"); r.err != nil || r.resp.StatusCode != http.StatusTooEarly ||
			r.resp.Header.Get("X-From") != "backend" || r.resp.Header.Get("X-Impulse-Error") != "" || r.body != "backend says too early" {
			t.Errorf("a backend's 425 did not pass through: %+v", r)
		}
		frames := await(t, post, "the 0-RTT POST's answer")
		if len(frames) == 0 {
			t.Fatal("no answer to the 0-RTT POST")
		}
		if st, _ := frames[0].field(":status"); st != "425" {
			t.Errorf("0-RTT POST: :status %q, want 425", st)
		}
		if reason, _ := frames[0].field("x-impulse-error"); reason != answer.TooEarly.Reason {
			t.Errorf("0-RTT POST: x-impulse-error %q, want %q", reason, answer.TooEarly.Reason)
		}
		await(t, conn.HandshakeComplete(), "the handshake")
		if cs := conn.ConnectionState(); !cs.Used0RTT || !cs.TLS.DidResume {
			t.Errorf("Used0RTT %v, DidResume %v: want both", cs.Used0RTT, cs.TLS.DidResume)
		}

		// Once the handshake has completed nothing is early: the retried
		// POST goes through unmarked, and a client's own Early-Data (it may
		// be a proxy that got the request in early data) is passed on,
		// never taken as the gateway's verdict.
		req, _ := http.NewRequest(http.MethodPost, h.base+"/early-post", strings.NewReader("data"))
		if r := await(t, goRoundTrip(tr, req), "the retried POST"); r.err != nil || r.resp.StatusCode != 200 {
			t.Errorf("POST after the handshake: %+v", r)
		}
		req, _ = http.NewRequest(http.MethodPost, h.base+"/client-marked", strings.NewReader("data"))
		req.Header.Set("Early-Data", "1")
		if r := await(t, goRoundTrip(tr, req), "the client-marked POST"); r.err != nil || r.resp.StatusCode != 200 {
			t.Errorf("POST with the client's Early-Data: %+v", r)
		}
		// Closed through the relay, so the harness's drain need not wait.
		tr.Close()
		eventually(t, 5*time.Second, func() bool { return quicConnsOpen(h) == 0 }, "the gateway to see the connection closed")
		want := []string{"GET /prime ", "GET /early 1", "GET /backend-425 1", "POST /early-post ", "POST /client-marked 1"}
		got := be.requests()
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("backend saw %q, want %q", got, want)
		}
	})

	t.Run("off", func(t *testing.T) {
		be := &earlyBackend{}
		h := startHarness(t, ListenerConfig{}, ProtocolH3, staticUpstream("u", "/", testbackend.NewH1(t, be)))
		cache := newTicketCache()
		tc := &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", ClientSessionCache: cache}
		if primeTicket(t, h, tc, cache) {
			t.Fatal("with early_data off, the session ticket offers early data")
		}
		conns := make(chan *quic.Conn, 1)
		tr := &http3.Transport{TLSClientConfig: tc, Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			c, err := quic.DialAddrEarly(ctx, addr, tlsCfg, cfg)
			if err == nil {
				conns <- c
			}
			return c, err
		}}
		defer tr.Close()
		req, _ := http.NewRequest(http3.MethodGet0RTT, h.base+"/early", nil)
		get := goRoundTrip(tr, req)
		conn := await(t, conns, "the dial")
		post := sendRaw(t, conn, rawPost("/early-post", "data"))
		if r := await(t, get, "GET /early"); r.err != nil || r.resp.StatusCode != 200 {
			t.Errorf("GET: %+v", r)
		}
		if frames := await(t, post, "the POST's answer"); len(frames) == 0 {
			t.Error("no answer to the POST")
		} else if st, _ := frames[0].field(":status"); st != "200" {
			t.Errorf("POST: :status %q, want 200", st)
		}
		if cs := conn.ConnectionState(); cs.Used0RTT || !cs.TLS.DidResume {
			t.Errorf("Used0RTT %v, DidResume %v: want a resumption without 0-RTT", cs.Used0RTT, cs.TLS.DidResume)
		}
		want := []string{"GET /prime ", "GET /early ", "POST /early-post "}
		got := be.requests()
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("backend saw %q, want %q", got, want)
		}
	})

	t.Run("gtlsclient", func(t *testing.T) {
		bin := tool(t, "gtlsclient", "ngtcp2-client")
		be := &earlyBackend{}
		h := startHarness(t, ListenerConfig{EarlyData: true}, ProtocolH3, staticUpstream("u", "/", testbackend.NewH1(t, be)))
		dir := t.TempDir()
		data := filepath.Join(dir, "body")
		if err := os.WriteFile(data, []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
		client := func(addr, method, path string) *exec.Cmd {
			host, port, _ := net.SplitHostPort(addr)
			args := []string{"--exit-on-all-streams-close", "--no-quic-dump", "--timeout=10s",
				"--session-file=" + filepath.Join(dir, "session"), "--tp-file=" + filepath.Join(dir, "tp"), "-m", method}
			if method == http.MethodPost {
				args = append(args, "-d", data)
			}
			return exec.Command(bin, append(args, host, port, "https://localhost"+path)...)
		}
		if out, err := client(h.gw.Addrs()["test"].String(), "GET", "/prime").CombinedOutput(); err != nil {
			t.Fatalf("priming run: %v\n%s", err, out)
		}
		for _, c := range []struct {
			method, path string
			handled      func() bool
			status       string
		}{
			{"GET", "/early", func() bool { return be.saw("GET /early 1") }, "200"},
			{"POST", "/early-post", func() bool { return requestsCountedOver(h.gw, ProtocolH3, "u", "4xx", answer.TooEarly.Reason) == 1 }, "425"},
		} {
			relay := newUDPRelay(t, h.gw.Addrs()["test"].String(), true)
			cmd := client(relay.addr(), c.method, c.path)
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			eventually(t, 10*time.Second, c.handled, c.method+" "+c.path+" to be handled in early data")
			relay.release()
			err := await(t, done, "gtlsclient")
			if status := firstStatus(out.String()); err != nil || status != c.status {
				t.Errorf("%s %s: %v, :status %q, want %s\n%s", c.method, c.path, err, status, c.status, out.String())
			}
		}
		if got, want := be.requests(), []string{"GET /prime ", "GET /early 1"}; !slices.Equal(got, want) {
			t.Errorf("backend saw %q, want %q", got, want)
		}
	})

	// Go's TLS server has no early data: over TCP nothing is ever early.
	t.Run("tcp", func(t *testing.T) {
		for _, proto := range tcpProtocols {
			be := &earlyBackend{}
			h := startHarness(t, ListenerConfig{EarlyData: true}, proto, staticUpstream("u", "/", testbackend.NewH1(t, be)))
			resp, err := h.client.Post(h.base+"/p", "text/plain", strings.NewReader("data"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := be.requests(); resp.StatusCode != 200 || !slices.Equal(got, []string{"POST /p "}) {
				t.Errorf("%s: %d, backend saw %q", proto, resp.StatusCode, got)
			}
		}
	})

	// A reload switches early data for new connections without rebinding;
	// once off, a ticket issued while it was on no longer gets 0-RTT.
	t.Run("reload", func(t *testing.T) {
		be := &earlyBackend{}
		ups := []UpstreamConfig{staticUpstream("u", "/", testbackend.NewH1(t, be))}
		h := startHarness(t, ListenerConfig{}, ProtocolH3, ups...)
		before := h.gw.Addrs()["test"].String()
		apply := func(on bool) {
			t.Helper()
			lc := ListenerConfig{Name: "test", Address: "127.0.0.1:0", EarlyData: on, TLS: &tls.Config{Certificates: []tls.Certificate{h.cert.TLS}}}
			if err := h.gw.Apply(context.Background(), Config{Listeners: []ListenerConfig{lc}, Upstreams: ups}); err != nil {
				t.Fatal(err)
			}
			if a := h.gw.Addrs()["test"].String(); a != before {
				t.Fatalf("the reload rebound the listener: %s, was %s", a, before)
			}
		}
		cache := newTicketCache()
		tc := &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", ClientSessionCache: cache, NextProtos: []string{http3.NextProtoH3}}
		if primeTicket(t, h, tc, cache) {
			t.Fatal("off: the ticket offers early data")
		}
		apply(true)
		if !primeTicket(t, h, tc, cache) {
			t.Fatal("turned on: the ticket does not offer early data")
		}
		apply(false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := quic.DialAddrEarly(ctx, before, tc, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseWithError(0, "")
		await(t, conn.HandshakeComplete(), "the handshake")
		if cs := conn.ConnectionState(); cs.Used0RTT || !cs.TLS.DidResume {
			t.Errorf("turned off: Used0RTT %v, DidResume %v; want a resumption without 0-RTT", cs.Used0RTT, cs.TLS.DidResume)
		}
	})
}

// TestEarlyDataUnvalidatedAddress: a client address in 0-RTT data is not
// validated (RFC 9000 §8.1: a spoofed source, or a spoofed balancer's
// datagram header, is accepted with a session ticket), so where IP rules
// would let it in, on the listener or the route, a 0-RTT GET is answered
// 425 too_early and never reaches the backend; sent again after the
// handshake, it is served. Without rules it is forwarded as before.
func TestEarlyDataUnvalidatedAddress(t *testing.T) {
	loopback := clientaddr.Rules{Allow: clientaddr.Prefixes{netip.MustParsePrefix("127.0.0.0/8")}}
	for _, tc := range []struct {
		name     string
		listener clientaddr.Rules
		route    clientaddr.Rules
		status   int
	}{
		{"listener rules", loopback, clientaddr.Rules{}, http.StatusTooEarly},
		{"route rules", clientaddr.Rules{}, loopback, http.StatusTooEarly},
		{"no rules", clientaddr.Rules{}, clientaddr.Rules{}, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be := &earlyBackend{}
			uc := staticUpstream("u", "/", testbackend.NewH1(t, be))
			uc.Routes[0].IPRules = tc.route
			h := startHarness(t, ListenerConfig{EarlyData: true, IPRules: tc.listener}, ProtocolH3, uc)
			cache := newTicketCache()
			tc2 := &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", ClientSessionCache: cache}
			if !primeTicket(t, h, tc2, cache) {
				t.Fatal("the session ticket does not offer early data")
			}
			relay := newUDPRelay(t, h.gw.Addrs()["test"].String(), true)
			tr := &http3.Transport{TLSClientConfig: tc2, Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
				return quic.DialAddrEarly(ctx, relay.addr(), tlsCfg, cfg)
			}}
			defer tr.Close()
			req, _ := http.NewRequest(http3.MethodGet0RTT, h.base+"/early", nil)
			early := goRoundTrip(tr, req)
			if tc.status == http.StatusTooEarly {
				eventually(t, 10*time.Second, func() bool {
					// The listener's rules answer before routing: no upstream.
					return requestsCountedOver(h.gw, ProtocolH3, "u", "4xx", answer.TooEarly.Reason)+
						requestsCountedOver(h.gw, ProtocolH3, "", "4xx", answer.TooEarly.Reason) == 1
				}, "the 0-RTT GET to be answered")
			} else {
				eventually(t, 10*time.Second, func() bool { return be.saw("GET /early 1") }, "the 0-RTT GET to reach the backend")
			}
			relay.release()
			if r := await(t, early, "GET /early"); r.err != nil || r.resp.StatusCode != tc.status {
				t.Fatalf("0-RTT GET: %+v, want %d", r, tc.status)
			}
			if tc.status != http.StatusTooEarly {
				return
			}
			if be.saw("GET /early 1") {
				t.Error("the backend saw the 0-RTT GET")
			}
			req, _ = http.NewRequest(http.MethodGet, h.base+"/early", nil)
			if r := await(t, goRoundTrip(tr, req), "GET /early after the handshake"); r.err != nil || r.resp.StatusCode != 200 {
				t.Errorf("GET after the handshake: %+v", r)
			}
		})
	}
}

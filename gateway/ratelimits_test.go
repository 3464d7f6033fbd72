package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// newRateBackend is an HTTP/1.1 backend that counts the requests it gets
// and answers "ok", and upstream "api", every path, to it.
func newRateBackend(t *testing.T) (*testbackend.Counter, UpstreamConfig) {
	cb := new(testbackend.Counter)
	return cb, staticUpstream("api", "/", testbackend.NewH1(t, testbackend.OK(cb)))
}

// clientFrom is a client for proto whose connections come from local
// address ip (another loopback address is another client_ip).
func clientFrom(t *testing.T, h *harness, proto, ip string) *http.Client {
	t.Helper()
	tc := &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"}
	local := net.ParseIP(ip)
	rt := clientTransport(proto, tc)
	switch tr := rt.(type) {
	case *http.Transport:
		tr.DialContext = (&net.Dialer{LocalAddr: &net.TCPAddr{IP: local}}).DialContext
		t.Cleanup(tr.CloseIdleConnections)
	case *http3.Transport:
		var mu sync.Mutex
		var socks []net.PacketConn
		tr.Dial = func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
			ra, err := net.ResolveUDPAddr("udp", addr)
			if err != nil {
				return nil, err
			}
			pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: local})
			if err != nil {
				return nil, err
			}
			mu.Lock()
			socks = append(socks, pc)
			mu.Unlock()
			return quic.DialEarly(ctx, pc, ra, tlsCfg, cfg)
		}
		t.Cleanup(func() {
			tr.Close()
			mu.Lock()
			defer mu.Unlock()
			for _, pc := range socks {
				pc.Close()
			}
		})
	}
	return &http.Client{Transport: rt, Timeout: 20 * time.Second}
}

// rateResult is what a batch of requests got: 200s, 429s (with their
// Retry-After values), anything else.
type rateResult struct {
	ok, limited int
	retryAfter  map[string]int
	other       []string
}

// send makes n requests at concurrency conc with headers kv (name, value
// pairs; a 429 must carry x-impulse-error rate_limited).
func send(t *testing.T, c *http.Client, url string, n, conc int, kv ...string) rateResult {
	t.Helper()
	res := rateResult{retryAfter: map[string]int{}}
	var mu sync.Mutex
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			for i := 0; i+1 < len(kv); i += 2 {
				req.Header.Set(kv[i], kv[i+1])
			}
			resp, err := c.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.other = append(res.other, err.Error())
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				res.ok++
			case http.StatusTooManyRequests:
				res.limited++
				res.retryAfter[resp.Header.Get("Retry-After")]++
				if e := resp.Header.Get("X-Impulse-Error"); e != "rate_limited" {
					res.other = append(res.other, "429 with x-impulse-error "+e)
				}
			default:
				res.other = append(res.other, resp.Status)
			}
		})
	}
	wg.Wait()
	if len(res.other) > 0 {
		t.Fatalf("unexpected answers: %v", res.other)
	}
	return res
}

// TestR07RateLimitAnswers429WithRetryAfter: case R07 over every ingress
// protocol. With a rate too slow to refill during the test, a burst of 100
// from one client gets exactly the burst through and 429s with
// Retry-After for the rest; a second client (another address) is not
// affected; the backend sees only the admitted requests. Then the case's
// own figures, 50/s with a burst of 10: about 10 + 50/s pass.
func TestR07RateLimitAnswers429WithRetryAfter(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		cb, uc := newRateBackend(t)
		uc.RateLimit = &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 10, Key: "client_ip"}
		h := startHarness(t, ListenerConfig{}, proto, uc)
		a := send(t, h.client, h.base+"/x", 100, 10)
		b := send(t, clientFrom(t, h, proto, "127.0.0.2"), h.base+"/x", 10, 10)
		if a.ok != 10 || a.limited != 90 {
			t.Errorf("first client: %d passed, %d limited; want 10 and 90", a.ok, a.limited)
		}
		for v, n := range a.retryAfter {
			if s, err := strconv.Atoi(v); err != nil || s < 90 || s > 100 {
				t.Errorf("Retry-After %q (%d times), want about 100 (seconds until the next token at 0.01/s)", v, n)
			}
		}
		if b.ok != 10 || b.limited != 0 {
			t.Errorf("second client: %d passed, %d limited; want all 10 through", b.ok, b.limited)
		}
		if n := cb.Total.Load(); n != 20 {
			t.Errorf("backend saw %d requests, want the 20 admitted", n)
		}

		// The case's figures, on a fresh upstream (a changed rate_limit
		// starts an empty table).
		uc.RateLimit = &ratelimit.Config{RequestsPerSecond: 50, Burst: 10}
		if err := h.gw.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{uc}, Listeners: []ListenerConfig{h.listenerConfig()}}); err != nil {
			t.Fatal(err)
		}
		before := cb.Total.Load()
		start := time.Now()
		r := send(t, h.client, h.base+"/x", 100, 10)
		elapsed := time.Since(start)
		limit := 10 + int(50*elapsed.Seconds()) + 1
		if r.ok < 10 || r.ok > limit || r.ok+r.limited != 100 {
			t.Errorf("50/s burst 10: %d passed, %d limited in %v; want 10..%d passed", r.ok, r.limited, elapsed, limit)
		}
		if elapsed < time.Second && r.limited == 0 {
			t.Errorf("100 requests in %v all passed a 50/s limit", elapsed)
		}
		for v := range r.retryAfter {
			if v != "1" {
				t.Errorf("Retry-After %q at 50/s, want 1 (at least one second)", v)
			}
		}
		if got := cb.Total.Load() - before; got != int64(r.ok) {
			t.Errorf("backend saw %d, %d were admitted", got, r.ok)
		}
	})
}

// listenerConfig is the harness's listener, as Apply needs it again.
func (h *harness) listenerConfig() ListenerConfig {
	h.gw.mu.Lock()
	defer h.gw.mu.Unlock()
	for name, l := range h.gw.listeners {
		return ListenerConfig{Name: name, Address: l.Address(), TLS: &tls.Config{Certificates: []tls.Certificate{h.cert.TLS}}}
	}
	h.t.Fatal("no listener")
	return ListenerConfig{}
}

// TestR07RateLimitKeys: header:NAME gives each value its own bucket and
// one shared bucket to requests without the header (or with an empty
// value); route gives each route one bucket shared by every client.
func TestR07RateLimitKeys(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		t.Run("header", func(t *testing.T) {
			cb, uc := newRateBackend(t)
			uc.RateLimit = &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 2, Key: "header:x-api-key"}
			h := startHarness(t, ListenerConfig{}, proto, uc)
			for _, c := range []struct {
				kv       []string
				ok, lim  int
				describe string
			}{
				{[]string{"X-Api-Key", "k1"}, 2, 3, "k1"},
				{[]string{"X-Api-Key", "k2"}, 2, 3, "k2, its own bucket"},
				{nil, 2, 3, "no header"},
				{[]string{"X-Api-Key", ""}, 0, 5, "an empty value, sharing the no-header bucket"},
				{[]string{"X-Api-Key", "k1", "X-Other", "y"}, 0, 5, "k1 again"},
			} {
				r := send(t, h.client, h.base+"/", 5, 1, c.kv...)
				if r.ok != c.ok || r.limited != c.lim {
					t.Errorf("%s: %d passed, %d limited; want %d, %d", c.describe, r.ok, r.limited, c.ok, c.lim)
				}
			}
			if n := cb.Total.Load(); n != 6 {
				t.Errorf("backend saw %d, want 6", n)
			}
		})
		t.Run("route", func(t *testing.T) {
			cb, uc := newRateBackend(t)
			uc.Routes = []RouteConfig{{PathPrefix: "/a"}, {PathPrefix: "/b"}}
			uc.RateLimit = &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 3, Key: "route"}
			h := startHarness(t, ListenerConfig{}, proto, uc)
			other := clientFrom(t, h, proto, "127.0.0.3")
			ra := send(t, h.client, h.base+"/a/1", 2, 1)
			rb := send(t, other, h.base+"/a/2", 2, 1) // another client, same route
			rc := send(t, other, h.base+"/b", 4, 1)
			if ra.ok+rb.ok != 3 || ra.limited+rb.limited != 1 || rc.ok != 3 || rc.limited != 1 {
				t.Errorf("route /a: %d+%d passed; route /b: %d passed, %d limited; want 3 per route", ra.ok, rb.ok, rc.ok, rc.limited)
			}
			if n := cb.Total.Load(); n != 6 {
				t.Errorf("backend saw %d, want 6", n)
			}
		})
	})
}

// TestR07ListenerRateLimit: a listener's rate limit covers every upstream
// behind it and comes first; a request it refuses does not count against
// the upstream's limit; impulse_rate_limited and impulse_requests count
// the refusals by scope and reason.
func TestR07ListenerRateLimit(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		sink := metrics.NewInmemSink(time.Hour, time.Hour)
		mcfg := metrics.DefaultConfig("impulse")
		mcfg.EnableHostname, mcfg.EnableRuntimeMetrics = false, false
		m, _ := metrics.New(mcfg, sink)
		cb, api := newRateBackend(t)
		api.Routes = []RouteConfig{{PathPrefix: "/api"}}
		api.RateLimit = &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 2} // client_ip
		_, web := newRateBackend(t)
		web.Name, web.Routes = "web", []RouteConfig{{PathPrefix: "/web"}}
		lc := ListenerConfig{RateLimit: &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 1, Key: "header:X-Client"}}
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{api, web}, Metrics: m}, lc, proto)
		steps := []struct {
			path, client string
			ok           bool
		}{
			{"/api", "a", true},  // listener a: 0 left; upstream: 1 left
			{"/api", "a", false}, // listener: refused, the upstream's token stays
			{"/web", "a", false}, // the listener's bucket covers every upstream
			{"/api", "b", true},  // upstream: 0 left
			{"/api", "c", false}, // upstream: refused (c's listener token is spent)
			{"/web", "d", true},  // web has no limit of its own
		}
		for i, s := range steps {
			r := send(t, h.client, h.base+s.path, 1, 1, "X-Client", s.client)
			if (r.ok == 1) != s.ok {
				t.Fatalf("step %d (%s as %s): passed=%v, want %v", i, s.path, s.client, r.ok == 1, s.ok)
			}
		}
		if n := cb.Total.Load(); n != 2 {
			t.Errorf("api backend saw %d, want 2", n)
		}
		want := []string{"limited upstream=api scope=listener 1", "limited upstream=api scope=upstream 1", "limited upstream=web scope=listener 1",
			"requests upstream=api code=4xx reason=rate_limited 2", "requests upstream=web code=4xx reason=rate_limited 1"}
		var got []string
		eventually(t, 5*time.Second, func() bool {
			h.gw.FlushMetrics()
			got = got[:0]
			for _, iv := range sink.Data() {
				for _, c := range iv.Counters {
					l := map[string]string{}
					for _, lb := range c.Labels {
						l[lb.Name] = lb.Value
					}
					switch {
					case c.Name == "impulse.rate.limited" && l["listener"] == "test":
						got = append(got, fmt.Sprintf("limited upstream=%s scope=%s %v", l["upstream"], l["scope"], c.Sum))
					case c.Name == "impulse.requests" && l["reason"] == "rate_limited" && l["protocol"] == proto:
						got = append(got, fmt.Sprintf("requests upstream=%s code=%s reason=%s %v", l["upstream"], l["code"], l["reason"], c.Sum))
					}
				}
			}
			sort.Strings(got)
			return strings.Join(got, "\n") == strings.Join(want, "\n")
		}, "the rate-limit metrics")
	})
}

// TestR07ReloadKeepsUnchangedRateLimits: an Apply with the same rate_limit
// keeps the buckets (an exhausted key stays refused); a changed one starts
// an empty table; removing it lifts the limit. The listener's works alike.
func TestR07ReloadKeepsUnchangedRateLimits(t *testing.T) {
	_, uc := newRateBackend(t)
	uc.RateLimit = &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 1}
	lcRate := &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 2, Key: "header:X-Client"}
	h := startHarness(t, ListenerConfig{RateLimit: lcRate}, ProtocolH2, uc)
	apply := func(up, lis *ratelimit.Config) {
		t.Helper()
		u := uc
		u.RateLimit = up
		lc := h.listenerConfig()
		lc.RateLimit = lis
		if err := h.gw.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{u}, Listeners: []ListenerConfig{lc}}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(client string) int {
		t.Helper()
		r := send(t, h.client, h.base+"/", 1, 1, "X-Client", client)
		if r.ok == 1 {
			return 200
		}
		return 429
	}
	if status("a") != 200 || status("b") != 429 {
		t.Fatal("the upstream's burst of 1 is not in force")
	}
	apply(&ratelimit.Config{RequestsPerSecond: 0.01, Burst: 1, Key: "client_ip"}, &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 2, Key: "header:x-client"}) // the same, written differently
	if status("c") != 429 {
		t.Error("an unchanged upstream rate_limit lost its buckets on reload")
	}
	apply(&ratelimit.Config{RequestsPerSecond: 0.01, Burst: 2}, lcRate)
	if status("d") != 200 {
		t.Error("a changed upstream rate_limit kept the old buckets")
	}
	apply(nil, lcRate)
	// Listener buckets so far: a 1, b 1, c 1, d 1 (refused requests take
	// nothing); a second "a" passes, a third is refused by the listener.
	if status("a") != 200 || status("a") != 429 {
		t.Error("listener bucket of a: want one more request, then 429")
	}
	apply(nil, &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 3, Key: "header:X-Client"})
	if status("a") != 200 {
		t.Error("a changed listener rate_limit kept the old buckets")
	}
	apply(nil, nil)
	for range 5 {
		if status("a") != 200 {
			t.Fatal("a removed rate_limit still refuses")
		}
	}
	// A bad block is refused by Apply and changes nothing.
	u := uc
	u.RateLimit = &ratelimit.Config{RequestsPerSecond: 0}
	if err := h.gw.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{u}, Listeners: []ListenerConfig{h.listenerConfig()}}); err == nil {
		t.Error("Apply accepted requests_per_second = 0")
	}
	lc := h.listenerConfig()
	lc.RateLimit = &ratelimit.Config{RequestsPerSecond: 1, Key: "cookie:x"}
	if err := h.gw.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{uc}, Listeners: []ListenerConfig{lc}}); err == nil {
		t.Error("Apply accepted key cookie:x")
	}
}

// TestR07RateLimitedUpgrade: an HTTP/1.1 WebSocket upgrade over the limit
// gets the 429 before any tunnel is opened.
func TestR07RateLimitedUpgrade(t *testing.T) {
	cb, uc := newRateBackend(t)
	uc.RateLimit = &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 1}
	h := startHarness(t, ListenerConfig{}, ProtocolH1, uc)
	if r := send(t, h.client, h.base+"/", 1, 1); r.ok != 1 {
		t.Fatal("first request refused")
	}
	req, _ := http.NewRequest(http.MethodGet, h.base+"/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("upgrade over the limit: %s, Retry-After %q; want 429 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
	if n := cb.Total.Load(); n != 1 {
		t.Errorf("backend saw %d, want 1", n)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Nanosecond: "1", 20 * time.Millisecond: "1", time.Second: "1", time.Second + 1: "2", 99500 * time.Millisecond: "100",
	} {
		if got := retryAfterSeconds(d); got != want {
			t.Errorf("retryAfterSeconds(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestR07RateLimitedGRPC: a gRPC call over the limit ends with
// RESOURCE_EXHAUSTED (Trailers-Only, grpcerr.go) and the Retry-After
// field.
func TestR07RateLimitedGRPC(t *testing.T) {
	uc, _ := grpcBackendWith(t, "h2c")
	uc.Routes = []RouteConfig{{PathPrefix: "/pkg.Svc/"}}
	uc.RateLimit = &ratelimit.Config{RequestsPerSecond: 0.01, Burst: 1}
	h := startHarness(t, ListenerConfig{}, ProtocolH3, uc)
	cc := grpcConn(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, out := []byte("x"), []byte(nil)
	if err := cc.Invoke(ctx, "/pkg.Svc/Unary", &in, &out); err != nil {
		t.Fatalf("first call: %v", err)
	}
	var hdr, trl metadata.MD // Trailers-Only: grpc-go reports its fields as trailers
	err := cc.Invoke(ctx, "/pkg.Svc/Unary", &in, &out, grpc.Header(&hdr), grpc.Trailer(&trl))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "rate_limited") {
		t.Fatalf("second call: %v, want RESOURCE_EXHAUSTED rate_limited", err)
	}
	if ra := append(hdr.Get("retry-after"), trl.Get("retry-after")...); len(ra) != 1 || ra[0] == "" {
		t.Errorf("Retry-After in the gRPC answer: %v", ra)
	}
}

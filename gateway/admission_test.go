package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"

	"github.com/impulse-agent/impulse-agent/gateway/concurrency"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// stallBackend is an HTTP/1.1 backend whose requests wait for a token on
// release (or the end of the test) before answering 200.
type stallBackend struct {
	srv      *httptest.Server
	arrived  atomic.Int64
	release  chan struct{}
	finished chan struct{} // closed at cleanup: every request ends
}

func newStallBackend(t *testing.T) *stallBackend {
	s := &stallBackend{release: make(chan struct{}, 1000), finished: make(chan struct{})}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.arrived.Add(1)
		select {
		case <-s.release:
		case <-s.finished:
		case <-r.Context().Done():
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(func() { close(s.finished); s.srv.Close() })
	return s
}

// free lets n stalled requests (present or future) answer.
func (s *stallBackend) free(n int) {
	for range n {
		s.release <- struct{}{}
	}
}

// limiterOf is the concurrency limiter of the named upstream.
func limiterOf(g *Gateway, name string) *concurrency.Limiter { return g.table.Load().limiters[name] }

// overloadedCount is the overloaded counter of scope and upstream.
func overloadedCount(g *Gateway, scope, up string) uint64 {
	if v, ok := g.metrics.overloads.Load(overloadKey{scope, up}); ok {
		return v.(*overloadCount).total.Load()
	}
	return 0
}

// checkOverloaded fails unless res is 503 overloaded with Retry-After: 1.
func checkOverloaded(t *testing.T, res asyncResult, what string) {
	t.Helper()
	if res.err != nil {
		t.Fatalf("%s: %v", what, res.err)
	}
	if res.resp.StatusCode != http.StatusServiceUnavailable || res.resp.Header.Get("X-Impulse-Error") != reasonOverloaded ||
		res.resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("%s: %d %q, Retry-After %q; want 503 overloaded, Retry-After 1", what, res.resp.StatusCode,
			res.resp.Header.Get("X-Impulse-Error"), res.resp.Header.Get("Retry-After"))
	}
}

func checkOK(t *testing.T, res asyncResult, what string) {
	t.Helper()
	if res.err != nil || res.resp.StatusCode != http.StatusOK {
		if res.err == nil {
			t.Fatalf("%s: %d %q", what, res.resp.StatusCode, res.resp.Header.Get("X-Impulse-Error"))
		}
		t.Fatalf("%s: %v", what, res.err)
	}
}

// awaitResult receives one result within 10 s.
func awaitResult(t *testing.T, c <-chan asyncResult, what string) asyncResult {
	t.Helper()
	select {
	case res := <-c:
		return res
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer in 10s", what)
		return asyncResult{}
	}
}

// TestR06FailFast is case R06 without a queue: max_requests = 10, a backend
// that does not answer, 50 concurrent requests. 10 reach the backend; the
// 40 others get 503 overloaded with Retry-After at once (while the 10 are
// still held) and never reach it; then the 10 are served and the count
// returns to 0.
func TestR06FailFast(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := newStallBackend(t)
		uc := staticUpstream("u", "/", be.srv)
		uc.MaxRequests = 10
		h := newHarnessOver(t, proto, uc)
		lim := limiterOf(h.gw, "u")
		var held []<-chan asyncResult
		for range 10 {
			held = append(held, h.getAsync("/slow"))
		}
		eventually(t, 10*time.Second, func() bool { return lim.InFlight() == 10 && be.arrived.Load() == 10 }, "10 requests in flight")
		var extra []<-chan asyncResult
		for range 40 {
			extra = append(extra, h.getAsync("/slow"))
		}
		for i, c := range extra {
			checkOverloaded(t, awaitResult(t, c, "extra request"), fmt.Sprintf("extra request %d", i))
		}
		if n := be.arrived.Load(); n != 10 {
			t.Fatalf("backend saw %d requests, want 10", n)
		}
		if n := overloadedCount(h.gw, scopeUpstream, "u"); n != 40 {
			t.Fatalf("overloaded counter %d, want 40", n)
		}
		be.free(10)
		for _, c := range held {
			checkOK(t, awaitResult(t, c, "held request"), "held request")
		}
		eventually(t, 5*time.Second, func() bool { return lim.InFlight() == 0 }, "the in-flight count back at 0")
	})
}

// TestR06QueueWaits: with max_queue, requests over the limit wait in line
// (never more than max_queue of them: the next is refused at once) and
// proceed in turn as slots free.
func TestR06QueueWaits(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := newStallBackend(t)
		uc := staticUpstream("u", "/", be.srv)
		uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout = 2, 3, 30*time.Second
		h := newHarnessOver(t, proto, uc)
		lim := limiterOf(h.gw, "u")
		var all []<-chan asyncResult
		for range 2 {
			all = append(all, h.getAsync("/"))
		}
		eventually(t, 10*time.Second, func() bool { return be.arrived.Load() == 2 }, "2 requests at the backend")
		for range 3 {
			all = append(all, h.getAsync("/"))
		}
		eventually(t, 10*time.Second, func() bool { return lim.Waiting() == 3 }, "3 requests queued")
		checkOverloaded(t, awaitResult(t, h.getAsync("/"), "request beyond the queue"), "request beyond the queue")
		if lim.Waiting() != 3 || be.arrived.Load() != 2 {
			t.Fatalf("waiting %d, backend saw %d", lim.Waiting(), be.arrived.Load())
		}
		for want := int64(3); want <= 5; want++ {
			be.free(1) // one request ends: the head of the line takes its slot
			eventually(t, 10*time.Second, func() bool { return be.arrived.Load() == want && lim.Waiting() == 5-want }, "the next queued request at the backend")
		}
		be.free(2)
		for _, c := range all {
			checkOK(t, awaitResult(t, c, "request"), "request")
		}
		eventually(t, 5*time.Second, func() bool { return lim.InFlight() == 0 && lim.Waiting() == 0 }, "nothing in flight or queued")
	})
}

// TestR06QueueWaves is case R06 with a queue: max_requests = 10 and room
// for the rest in line, a backend that takes a while, 50 concurrent
// requests: all are served, in about five waves.
func TestR06QueueWaves(t *testing.T) {
	const wave = 100 * time.Millisecond
	forEachProtocol(t, func(t *testing.T, proto string) {
		var mu sync.Mutex
		inFlight, peak := 0, 0
		be := newH1Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			inFlight++
			peak = max(peak, inFlight)
			mu.Unlock()
			time.Sleep(wave) // the backend's work, not a wait for a condition
			mu.Lock()
			inFlight--
			mu.Unlock()
		}))
		uc := staticUpstream("u", "/", be)
		uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout = 10, 40, 30*time.Second
		h := newHarnessOver(t, proto, uc)
		start := time.Now()
		var all []<-chan asyncResult
		for range 50 {
			all = append(all, h.getAsync("/"))
		}
		for _, c := range all {
			checkOK(t, awaitResult(t, c, "request"), "request")
		}
		if d := time.Since(start); d < 5*wave {
			t.Fatalf("50 requests in %v: fewer than five waves of %v", d, wave)
		}
		if peak > 10 {
			t.Fatalf("the backend had %d requests at once, max_requests 10", peak)
		}
	})
}

// TestR06QueueTimeout: a request that waits queue_timeout in line gets
// 503 overloaded and leaves it.
func TestR06QueueTimeout(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := newStallBackend(t)
		uc := staticUpstream("u", "/", be.srv)
		uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout = 1, 1, 200*time.Millisecond
		h := newHarnessOver(t, proto, uc)
		lim := limiterOf(h.gw, "u")
		held := h.getAsync("/")
		eventually(t, 10*time.Second, func() bool { return be.arrived.Load() == 1 }, "a request at the backend")
		start := time.Now()
		checkOverloaded(t, awaitResult(t, h.getAsync("/"), "queued request"), "queued request")
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("refused after %v, before queue_timeout", d)
		}
		if lim.Waiting() != 0 || be.arrived.Load() != 1 {
			t.Fatalf("waiting %d, backend saw %d", lim.Waiting(), be.arrived.Load())
		}
		be.free(1)
		checkOK(t, awaitResult(t, held, "held request"), "held request")
	})
}

// TestR06ClientLeavesQueue: a client that goes away while queued leaves
// the line (no leak, nothing reaches the backend), and the place is free
// for the next one.
func TestR06ClientLeavesQueue(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := newStallBackend(t)
		uc := staticUpstream("u", "/", be.srv)
		uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout = 1, 1, 30*time.Second
		h := newHarnessOver(t, proto, uc)
		lim := limiterOf(h.gw, "u")
		held := h.getAsync("/")
		eventually(t, 10*time.Second, func() bool { return be.arrived.Load() == 1 }, "a request at the backend")
		ctx, cancel := context.WithCancel(context.Background())
		gone := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.base+"/", nil)
			resp, err := h.client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			gone <- err
		}()
		eventually(t, 10*time.Second, func() bool { return lim.Waiting() == 1 }, "a request queued")
		cancel()
		if err := <-gone; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled request: %v", err)
		}
		eventually(t, 10*time.Second, func() bool { return lim.Waiting() == 0 }, "the canceled request out of the queue")
		next := h.getAsync("/")
		eventually(t, 10*time.Second, func() bool { return lim.Waiting() == 1 }, "the next request queued")
		be.free(2)
		checkOK(t, awaitResult(t, held, "held request"), "held request")
		checkOK(t, awaitResult(t, next, "next request"), "next request")
		if n := be.arrived.Load(); n != 2 {
			t.Fatalf("backend saw %d requests, want 2 (not the canceled one)", n)
		}
		eventually(t, 5*time.Second, func() bool { return lim.InFlight() == 0 }, "nothing in flight")
	})
}

// TestR06PerBackend: max_requests_per_backend makes the pick skip a full
// backend rather than queue behind it; when every backend is full the
// request is overloaded, not no_healthy_backend.
func TestR06PerBackend(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		a, b := newStallBackend(t), newStallBackend(t)
		uc := staticUpstream("u", "/", a.srv, b.srv)
		uc.MaxRequestsPerBackend = 2
		h := newHarnessOver(t, proto, uc)
		var held []<-chan asyncResult
		for i := range 4 {
			held = append(held, h.getAsync("/"))
			// One at a time: each pick sees the counts of the ones before.
			eventually(t, 10*time.Second, func() bool { return a.arrived.Load()+b.arrived.Load() == int64(i+1) }, "the request at a backend")
		}
		if a.arrived.Load() != 2 || b.arrived.Load() != 2 {
			t.Fatalf("backends saw %d and %d requests, want 2 each", a.arrived.Load(), b.arrived.Load())
		}
		checkOverloaded(t, awaitResult(t, h.getAsync("/"), "request with every backend full"), "request with every backend full")
		if n := overloadedCount(h.gw, scopeBackend, "u"); n != 1 {
			t.Fatalf("overloaded counter (backend) %d, want 1", n)
		}
		a.free(1)
		eventually(t, 10*time.Second, func() bool { return h.gw.table.Load().upstreams["u"].Current().Backends[0].InFlight() < 2 }, "a slot free on a")
		c := h.getAsync("/")
		eventually(t, 10*time.Second, func() bool { return a.arrived.Load() == 3 }, "the next request on the backend with room")
		a.free(2)
		b.free(2)
		for _, r := range append(held, c) {
			checkOK(t, awaitResult(t, r, "request"), "request")
		}
		if b.arrived.Load() != 2 {
			t.Fatalf("the full backend got %d requests", b.arrived.Load())
		}
	})
}

// TestR06Global: the top-level max_requests counts every upstream's
// requests and is checked first; a request refused by one limit holds no
// slot of another, and requests refused before admission (no route)
// count against none.
func TestR06Global(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		ba, bb := newStallBackend(t), newStallBackend(t)
		ua, ub := staticUpstream("a", "/a", ba.srv), staticUpstream("b", "/b", bb.srv)
		ua.MaxRequests = 1
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{ua, ub}, MaxRequests: 3}, ListenerConfig{}, proto)
		g, la := h.gw, limiterOf(h.gw, "a")
		a1 := h.getAsync("/a")
		eventually(t, 10*time.Second, func() bool { return ba.arrived.Load() == 1 }, "a1 at its backend")
		checkOverloaded(t, awaitResult(t, h.getAsync("/a"), "a2 over upstream a's limit"), "a2")
		if g.global.InFlight() != 1 {
			t.Fatalf("global in flight %d after an upstream refusal, want 1", g.global.InFlight())
		}
		if res := awaitResult(t, h.getAsync("/nowhere"), "unrouted"); res.err != nil || res.resp.StatusCode != http.StatusNotFound {
			t.Fatalf("unrouted: %+v", res)
		}
		b1, b2 := h.getAsync("/b"), h.getAsync("/b")
		eventually(t, 10*time.Second, func() bool { return bb.arrived.Load() == 2 && g.global.InFlight() == 3 }, "b1, b2 at their backend")
		checkOverloaded(t, awaitResult(t, h.getAsync("/b"), "b3 over the global limit"), "b3")
		checkOverloaded(t, awaitResult(t, h.getAsync("/a"), "a3 over the global limit"), "a3")
		if la.InFlight() != 1 || bb.arrived.Load() != 2 {
			t.Fatalf("upstream a in flight %d, backend b saw %d", la.InFlight(), bb.arrived.Load())
		}
		if ng, nu := overloadedCount(g, scopeGlobal, "b")+overloadedCount(g, scopeGlobal, "a"), overloadedCount(g, scopeUpstream, "a"); ng != 2 || nu != 1 {
			t.Fatalf("overloaded counters: global %d, upstream %d; want 2, 1", ng, nu)
		}
		ba.free(1)
		bb.free(2)
		for _, c := range []<-chan asyncResult{a1, b1, b2} {
			checkOK(t, awaitResult(t, c, "held request"), "held request")
		}
		eventually(t, 5*time.Second, func() bool { return g.global.InFlight() == 0 && la.InFlight() == 0 }, "nothing in flight")
		// Apply lowers the global limit at once.
		if err := g.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{ua, ub}, MaxRequests: 1,
			Listeners: []ListenerConfig{{Name: "test", Address: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{h.cert.TLS}}}}}); err != nil {
			t.Fatal(err)
		}
		b4 := h.getAsync("/b")
		eventually(t, 10*time.Second, func() bool { return bb.arrived.Load() == 3 }, "b4 at its backend")
		checkOverloaded(t, awaitResult(t, h.getAsync("/a"), "a4 over the lowered global limit"), "a4")
		bb.free(1)
		checkOK(t, awaitResult(t, b4, "b4"), "b4")
	})
}

// TestR06TunnelHoldsSlot: a WebSocket tunnel goes through the same
// admission and holds its slot for its whole life.
func TestR06TunnelHoldsSlot(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		e := newWSEcho(t)
		uc := wsUpstream(e, nil)
		uc.MaxRequests = 1
		h := newHarnessOver(t, proto, uc)
		lim := limiterOf(h.gw, "ws")
		c, err := dialWS(t, h, "/ws/echo", nil)
		if err != nil {
			t.Fatal(err)
		}
		if lim.InFlight() != 1 {
			t.Fatalf("in flight %d with a tunnel open", lim.InFlight())
		}
		if c2, err := dialWS(t, h, "/ws/echo", nil); c2 == nil || c2.status != http.StatusServiceUnavailable {
			if c2 != nil && c2.close != nil && c2.rw != nil {
				c2.close()
			}
			t.Fatalf("second tunnel: %+v, %v; want 503", c2, err)
		}
		checkOverloaded(t, awaitResult(t, h.getAsync("/ws/plain"), "request beside the tunnel"), "request beside the tunnel")
		c.close()
		eventually(t, 10*time.Second, func() bool { return lim.InFlight() == 0 }, "the slot freed with the tunnel")
		c, err = dialWS(t, h, "/ws/echo", nil)
		if err != nil {
			t.Fatal(err)
		}
		c.close()
	})
}

// BenchmarkAdmission is admit, pick and release of one request when the
// concurrency limits are off and when they are on but not reached: no
// allocation either way (plus TestAdmissionNoAlloc).
func BenchmarkAdmission(b *testing.B) {
	for _, bc := range []struct {
		name                         string
		global, maxReq, queue, perBE int
	}{{"off", 0, 0, 0, 0}, {"under", 1 << 20, 1 << 20, 100, 1 << 20}} {
		b.Run(bc.name, func(b *testing.B) {
			g, rec, r, up := admissionFixture(b, bc.global, bc.maxReq, bc.queue, bc.perBE)
			b.ReportAllocs()
			for b.Loop() {
				admitOnce(g, rec, r, up)
			}
		})
	}
}

func admitOnce(g *Gateway, rec recorder, r *http.Request, up *upstream.Upstream) {
	held, ok := g.admit(rec, nil, up)
	if !ok {
		panic("refused")
	}
	be := g.pick(rec, nil, r, up)
	if be == nil {
		panic("no backend")
	}
	be.Done(health.Neutral, "", 0)
	held.release()
}

// TestAdmissionNoAlloc: admission below the limits does not allocate.
func TestAdmissionNoAlloc(t *testing.T) {
	for _, on := range []bool{false, true} {
		n := 0
		if on {
			n = 1000
		}
		g, rec, r, up := admissionFixture(t, n, n, n, n)
		if a := testing.AllocsPerRun(1000, func() { admitOnce(g, rec, r, up) }); a != 0 {
			t.Errorf("limits on %v: %v allocations per request", on, a)
		}
	}
}

func admissionFixture(tb testing.TB, global, maxReq, queue, perBE int) (*Gateway, recorder, *http.Request, *upstream.Upstream) {
	mem := memBackend{body: bytes.Repeat([]byte("x"), 64)}
	uc := UpstreamConfig{Config: upstream.Config{Name: "web",
		NewTransport: func(transport.Options) (transport.RoundTripper, error) { return mem, nil }},
		Routes:      []RouteConfig{{PathPrefix: "/"}},
		Static:      []upstream.Spec{{ID: "a", Scheme: "http", Host: "127.0.0.1", Port: 1, Weight: 1}, {ID: "b", Scheme: "http", Host: "127.0.0.1", Port: 2, Weight: 1}},
		MaxRequests: maxReq, MaxQueue: queue, QueueTimeout: time.Second, MaxRequestsPerBackend: perBE}
	g, err := New(Config{Upstreams: []UpstreamConfig{uc}, MaxRequests: global})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Shutdown(context.Background()) })
	u, _ := url.Parse("https://example.com/")
	r := (&http.Request{Method: "GET", URL: u, Host: "example.com", Header: http.Header{}, ProtoMajor: 3}).WithContext(context.Background())
	return g, recorder{g: g, r: r, start: time.Now()}, r, g.table.Load().upstreams["web"]
}

// TestR06GRPC: a gRPC call over the limit gets UNAVAILABLE (Trailers-Only)
// with x-impulse-error overloaded and Retry-After; a queued call whose
// grpc-timeout passes in line gets DEADLINE_EXCEEDED.
func TestR06GRPC(t *testing.T) {
	uc, probe := grpcBackendWith(t, "h2c")
	uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout = 1, 1, 30*time.Second
	h := newHarness(t, uc)
	lim := limiterOf(h.gw, uc.Name)
	// The first call waits at the backend until the client cancels it.
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequestWithContext(ctx1, http.MethodPost, h.base+"/pkg.Svc/Wait", pr)
	req.Header = http.Header{"Content-Type": {"application/grpc"}, "Te": {"trailers"}}
	go func() {
		if resp, err := h2Client(h).Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	pw.Write([]byte(grpcMessage("x")))
	waitFor(t, probe.started, "the first call at the backend")
	c2 := startRawGRPC(t, h.client, h.base, "/pkg.Svc/Unary", "Grpc-Timeout", "300m") // HTTP/3
	c2.send("x")
	c2.closeSend()
	eventually(t, 10*time.Second, func() bool { return lim.Waiting() == 1 }, "the second call queued")
	c3 := startRawGRPC(t, h2Client(h), h.base, "/pkg.Svc/Unary")
	c3.send("x")
	c3.closeSend()
	if st, msg := c3.status(); st != "14" || msg != reasonOverloaded || c3.response().Header.Get("Retry-After") != "1" {
		t.Fatalf("call beyond the queue: grpc-status %q %q, Retry-After %q; want UNAVAILABLE overloaded", st, msg, c3.response().Header.Get("Retry-After"))
	}
	if st, msg := c2.status(); st != "4" || msg != reasonGRPCTimeout {
		t.Fatalf("queued call: grpc-status %q %q, want DEADLINE_EXCEEDED %s", st, msg, reasonGRPCTimeout)
	}
	if d := time.Since(c2.start); d < 300*time.Millisecond {
		t.Fatalf("queued call ended after %v, before its grpc-timeout", d)
	}
	if lim.Waiting() != 0 || lim.InFlight() != 1 {
		t.Fatalf("waiting %d, in flight %d", lim.Waiting(), lim.InFlight())
	}
	cancel1()
	eventually(t, 10*time.Second, func() bool { return lim.InFlight() == 0 }, "the canceled call's slot freed")
}

// TestR06LimitMetrics: the limit gauges show in-flight requests against
// each limit (global, upstream, the busiest backend) and the queue depth;
// refusals are counted by scope.
func TestR06LimitMetrics(t *testing.T) {
	sink := metrics.NewInmemSink(time.Hour, time.Hour)
	cfg := metrics.DefaultConfig("impulse")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics = false, false
	m, _ := metrics.New(cfg, sink)
	be := newStallBackend(t)
	uc := staticUpstream("u", "/", be.srv)
	uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout, uc.MaxRequestsPerBackend = 2, 2, 30*time.Second, 5
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{uc}, MaxRequests: 10, Metrics: m}, ListenerConfig{}, ProtocolH2)
	var all []<-chan asyncResult
	for range 4 {
		all = append(all, h.getAsync("/"))
	}
	eventually(t, 10*time.Second, func() bool { return limiterOf(h.gw, "u").Waiting() == 2 }, "2 requests queued")
	checkOverloaded(t, awaitResult(t, h.getAsync("/"), "request beyond the queue"), "request beyond the queue")
	gauges := func() map[string]float32 {
		out := map[string]float32{}
		for _, iv := range sink.Data() {
			iv.RLock()
			for _, g := range iv.Gauges {
				if !strings.HasPrefix(g.Name, "impulse.limit.") {
					continue
				}
				k := g.Name
				for _, l := range g.Labels {
					k += "/" + l.Value
				}
				out[k] = g.Value
			}
			for _, c := range iv.Counters {
				if c.Name == "impulse.limit.overloaded" {
					k := c.Name
					for _, l := range c.Labels {
						k += "/" + l.Value
					}
					out[k] = float32(c.Sum)
				}
			}
			iv.RUnlock()
		}
		return out
	}
	want := map[string]float32{
		"impulse.limit.in_flight/global/":     4, // the queued hold their global slot
		"impulse.limit.max/global/":           10,
		"impulse.limit.in_flight/upstream/u":  2,
		"impulse.limit.max/upstream/u":        2,
		"impulse.limit.queue_depth/u":         2,
		"impulse.limit.in_flight/backend/u":   2,
		"impulse.limit.max/backend/u":         5,
		"impulse.limit.overloaded/upstream/u": 1,
	}
	var got map[string]float32
	eventually(t, 10*time.Second, func() bool {
		h.gw.FlushMetrics()
		got = gauges()
		for k, v := range want {
			if got[k] != v {
				return false
			}
		}
		return true
	}, "the limit metrics")
	be.free(4)
	for _, c := range all {
		checkOK(t, awaitResult(t, c, "request"), "request")
	}
	eventually(t, 10*time.Second, func() bool {
		got = gauges()
		return got["impulse.limit.in_flight/global/"] == 0 && got["impulse.limit.in_flight/upstream/u"] == 0 && got["impulse.limit.queue_depth/u"] == 0
	}, "the gauges back at 0")
}

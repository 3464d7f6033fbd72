package gateway

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestR06PerBackend: max_requests_per_backend makes the pick skip a full
// backend rather than queue behind it; when every backend is full the
// request is overloaded, not no_healthy_backend.
func TestR06PerBackend(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		a, b := testbackend.NewStall(t), testbackend.NewStall(t)
		uc := staticUpstream("u", "/", a.Server, b.Server)
		uc.MaxRequestsPerBackend = 2
		h := newHarnessOver(t, proto, uc)
		var held []<-chan asyncResult
		for i := range 4 {
			held = append(held, h.getAsync("/"))
			// One at a time: each pick sees the counts of the ones before.
			eventually(t, 10*time.Second, func() bool { return a.Arrived.Load()+b.Arrived.Load() == int64(i+1) }, "the request at a backend")
		}
		if a.Arrived.Load() != 2 || b.Arrived.Load() != 2 {
			t.Fatalf("backends saw %d and %d requests, want 2 each", a.Arrived.Load(), b.Arrived.Load())
		}
		checkOverloaded(t, awaitResult(t, h.getAsync("/"), "request with every backend full"), "request with every backend full")
		if n := overloadedCount(h.gw, scopeBackend, "u"); n != 1 {
			t.Fatalf("overloaded counter (backend) %d, want 1", n)
		}
		a.Free(1)
		eventually(t, 10*time.Second, func() bool { return h.gw.table.Load().upstreams["u"].Current().Backends[0].InFlight() < 2 }, "a slot free on a")
		c := h.getAsync("/")
		eventually(t, 10*time.Second, func() bool { return a.Arrived.Load() == 3 }, "the next request on the backend with room")
		a.Free(2)
		b.Free(2)
		for _, r := range append(held, c) {
			checkOK(t, awaitResult(t, r, "request"), "request")
		}
		if b.Arrived.Load() != 2 {
			t.Fatalf("the full backend got %d requests", b.Arrived.Load())
		}
	})
}

// TestR06Global: the top-level max_requests counts every upstream's
// requests and is checked first; a request refused by one limit holds no
// slot of another, and requests refused before admission (no route)
// count against none.
func TestR06Global(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		ba, bb := testbackend.NewStall(t), testbackend.NewStall(t)
		ua, ub := staticUpstream("a", "/a", ba.Server), staticUpstream("b", "/b", bb.Server)
		ua.MaxRequests = 1
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{ua, ub}, MaxRequests: 3}, ListenerConfig{}, proto)
		g, la := h.gw, limiterOf(h.gw, "a")
		a1 := h.getAsync("/a")
		eventually(t, 10*time.Second, func() bool { return ba.Arrived.Load() == 1 }, "a1 at its backend")
		checkOverloaded(t, awaitResult(t, h.getAsync("/a"), "a2 over upstream a's limit"), "a2")
		if g.global.InFlight() != 1 {
			t.Fatalf("global in flight %d after an upstream refusal, want 1", g.global.InFlight())
		}
		if res := awaitResult(t, h.getAsync("/nowhere"), "unrouted"); res.err != nil || res.resp.StatusCode != http.StatusNotFound {
			t.Fatalf("unrouted: %+v", res)
		}
		b1, b2 := h.getAsync("/b"), h.getAsync("/b")
		eventually(t, 10*time.Second, func() bool { return bb.Arrived.Load() == 2 && g.global.InFlight() == 3 }, "b1, b2 at their backend")
		checkOverloaded(t, awaitResult(t, h.getAsync("/b"), "b3 over the global limit"), "b3")
		checkOverloaded(t, awaitResult(t, h.getAsync("/a"), "a3 over the global limit"), "a3")
		if la.InFlight() != 1 || bb.Arrived.Load() != 2 {
			t.Fatalf("upstream a in flight %d, backend b saw %d", la.InFlight(), bb.Arrived.Load())
		}
		if ng, nu := overloadedCount(g, scopeGlobal, "b")+overloadedCount(g, scopeGlobal, "a"), overloadedCount(g, scopeUpstream, "a"); ng != 2 || nu != 1 {
			t.Fatalf("overloaded counters: global %d, upstream %d; want 2, 1", ng, nu)
		}
		ba.Free(1)
		bb.Free(2)
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
		eventually(t, 10*time.Second, func() bool { return bb.Arrived.Load() == 3 }, "b4 at its backend")
		checkOverloaded(t, awaitResult(t, h.getAsync("/a"), "a4 over the lowered global limit"), "a4")
		bb.Free(1)
		checkOK(t, awaitResult(t, b4, "b4"), "b4")
	})
}

// TestR06RateLimitedTakesNoSlot: a request the rate limit refuses (429)
// never counts against a concurrency limit, global or upstream.
func TestR06RateLimitedTakesNoSlot(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := testbackend.NewStall(t)
		uc := staticUpstream("u", "/", be.Server)
		uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout = 2, 1, 30*time.Second
		uc.RateLimit = &ratelimit.Config{RequestsPerSecond: 0.001, Burst: 1}
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{uc}, MaxRequests: 2}, ListenerConfig{}, proto)
		lim := limiterOf(h.gw, "u")
		held := h.getAsync("/")
		eventually(t, 10*time.Second, func() bool { return be.Arrived.Load() == 1 }, "the first request at the backend")
		for range 3 {
			res := awaitResult(t, h.getAsync("/"), "rate-limited request")
			if res.err != nil || res.resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("over the rate limit: %+v", res)
			}
		}
		if lim.InFlight() != 1 || lim.Waiting() != 0 || h.gw.global.InFlight() != 1 {
			t.Fatalf("upstream in flight %d, waiting %d, global %d; want 1, 0, 1", lim.InFlight(), lim.Waiting(), h.gw.global.InFlight())
		}
		be.Free(1)
		checkOK(t, awaitResult(t, held, "held request"), "held request")
	})
}

// TestR06TunnelHoldsSlot: a WebSocket tunnel goes through the same
// admission and holds its slot for its whole life.
func TestR06TunnelHoldsSlot(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		e := testbackend.NewWSEcho(t)
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
	if st, msg := c3.status(); st != "14" || msg != answer.Overloaded.Reason || c3.response().Header.Get("Retry-After") != "1" {
		t.Fatalf("call beyond the queue: grpc-status %q %q, Retry-After %q; want UNAVAILABLE overloaded", st, msg, c3.response().Header.Get("Retry-After"))
	}
	if st, msg := c2.status(); st != "4" || msg != answer.GRPCTimeout.Reason {
		t.Fatalf("queued call: grpc-status %q %q, want DEADLINE_EXCEEDED %s", st, msg, answer.GRPCTimeout.Reason)
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
	be := testbackend.NewStall(t)
	uc := staticUpstream("u", "/", be.Server)
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
	be.Free(4)
	for _, c := range all {
		checkOK(t, awaitResult(t, c, "request"), "request")
	}
	eventually(t, 10*time.Second, func() bool {
		got = gauges()
		return got["impulse.limit.in_flight/global/"] == 0 && got["impulse.limit.in_flight/upstream/u"] == 0 && got["impulse.limit.queue_depth/u"] == 0
	}, "the gauges back at 0")
}

package gateway

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestColdBurstPutsAtMostTheLimitOnABlackHole: a burst of 30 requests at
// a gateway whose upstream has answered nothing yet, over three backends
// of which one never answers (a black hole) and two answer only once the
// test opens them. Each backend is given outlier detection's stall limit
// (5 requests), the rest wait for the upstream's first answer, and then
// go to the backends that answered: the black hole holds 5, not a third
// of the burst.
func TestColdBurstPutsAtMostTheLimitOnABlackHole(t *testing.T) {
	hole := testbackend.NewStall(t)
	open := make(chan struct{})
	var arrived atomic.Int64
	gated := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			arrived.Add(1)
			<-open
			io.WriteString(w, name)
		})
	}
	uc := staticUpstream("u", "/", testbackend.NewH1(t, gated("a")), testbackend.NewH1(t, gated("b")), hole.Server)
	uc.LoadBalancing = "round_robin"
	uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 5, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
	h := newHarnessOver(t, ProtocolH1, uc)
	var once sync.Once
	release := func() { once.Do(func() { close(open) }) }
	t.Cleanup(release)          // before the backends close: their handlers wait on it
	h.gw.coldHold = time.Minute // the first answer comes when the test says so

	const burst = 30
	var wg sync.WaitGroup
	var answered atomic.Int64
	for range burst {
		wg.Go(func() {
			resp, err := h.client.Get(h.base + "/")
			if err != nil {
				return // the black hole's, cut at the test's end
			}
			defer resp.Body.Close()
			if b, _ := io.ReadAll(resp.Body); resp.StatusCode == 200 && (string(b) == "a" || string(b) == "b") {
				answered.Add(1)
			}
		})
	}
	eventually(t, 10*time.Second, func() bool { return arrived.Load() == 10 && hole.Arrived.Load() == 5 },
		"5 requests at each backend")
	u := liveBackend(t, h, "u", "2")
	if n := hole.Arrived.Load(); n != 5 || arrived.Load() != 10 {
		t.Fatalf("before any answer: %d at the black hole, %d at the others, want 5 and 10", n, arrived.Load())
	}
	release()
	eventually(t, 10*time.Second, func() bool { return answered.Load() == burst-5 }, "every request but the black hole's answered")
	if n := hole.Arrived.Load(); n != 5 || u.InFlight() != 5 {
		t.Errorf("the black hole got %d requests (%d in flight), want 5", n, u.InFlight())
	}
	for _, b := range h.gw.Backends() {
		if behind := b.ID == "2"; b.Behind != behind {
			t.Errorf("/v1/backends: backend %s behind = %v, want %v", b.ID, b.Behind, behind)
		}
	}
	hole.Free(5)
	wg.Wait()
}

// TestBlackHolesStuckRequestsAreRetriedFree: the requests a black hole
// held until response_header are retried on the backends that answer
// without a budget slot (the budget here allows no paid retry at all):
// each is the request that should have gone elsewhere, as a refused
// connection's is. Every request of the burst gets its 200.
func TestBlackHolesStuckRequestsAreRetriedFree(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		hole := testbackend.NewStall(t)
		ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
		uc := staticUpstream("u", "/", testbackend.NewH1(t, ok), testbackend.NewH1(t, ok), hole.Server)
		uc.LoadBalancing = "round_robin"
		uc.ResponseHeaderTimeout = time.Second
		uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 5, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
		uc.Retry = retryOn(2)
		uc.Retry.Budget = retry.Budget{} // no paid retry
		h := newHarnessOver(t, ingress, uc)

		const burst = 15
		var wg sync.WaitGroup
		var good atomic.Int64
		for range burst {
			wg.Go(func() {
				resp, err := h.client.Get(h.base + "/")
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				if b, _ := io.ReadAll(resp.Body); resp.StatusCode == 200 && string(b) == "ok" {
					good.Add(1)
				}
			})
		}
		wg.Wait()
		if n := good.Load(); n != burst || hole.Arrived.Load() != 5 {
			t.Fatalf("%d of %d requests answered 200, the black hole got %d; want all, and 5", n, burst, hole.Arrived.Load())
		}
	})
}

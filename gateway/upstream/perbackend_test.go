package upstream

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/balance"
	"github.com/impulse-agent/impulse-agent/gateway/health"
)

// TestMaxRequestsPerBackend: with max_requests_per_backend every policy
// skips a full backend rather than queue behind it; TryAcquire refuses a
// full one; once all are full Pick finds none and the set is Saturated
// (not a health problem); a Done frees the backend again.
func TestMaxRequestsPerBackend(t *testing.T) {
	for _, pc := range []struct{ policy, hashOn string }{
		{balance.RoundRobin, ""}, {balance.Random, ""}, {balance.LeastRequest, ""},
		{balance.ConsistentHash, "header:X-User"}, {balance.EWMA, ""},
	} {
		t.Run(pc.policy, func(t *testing.T) {
			u, err := New(Config{Name: "web", LoadBalancing: pc.policy, HashOn: pc.hashOn})
			if err != nil {
				t.Fatal(err)
			}
			defer u.Close()
			if err := u.SetStatic([]Spec{spec("a", 1), spec("b", 2), spec("c", 3)}); err != nil {
				t.Fatal(err)
			}
			u.SetMaxRequestsPerBackend(2)
			bs := u.Current().Backends
			full := bs[0]
			for range 2 {
				if !full.TryAcquire() {
					t.Fatal("TryAcquire refused below the limit")
				}
			}
			if full.TryAcquire() || !full.Full() {
				t.Fatal("TryAcquire over the limit")
			}
			req := func(i int) *http.Request {
				return &http.Request{Header: http.Header{"X-User": {fmt.Sprintf("user-%d", i)}}}
			}
			for i := range 200 {
				if b, _ := u.Pick(req(i)); b == nil || b == full {
					t.Fatalf("pick %d: %v, want a backend that is not full", i, b)
				}
			}
			if u.Current().Saturated() {
				t.Fatal("saturated with free backends")
			}
			for _, b := range bs[1:] {
				b.TryAcquire()
				b.TryAcquire()
			}
			b, set := u.Pick(req(0))
			if b != nil || !set.Saturated() {
				t.Fatalf("all full: picked %v, saturated %v", b, set.Saturated())
			}
			bs[1].Done(health.Neutral, "", time.Millisecond)
			for i := range 50 {
				if b, _ := u.Pick(req(i)); b != bs[1] {
					t.Fatalf("pick %d after a Done: %v, want the freed backend", i, b)
				}
			}
			u.SetMaxRequestsPerBackend(0)
			if full.Full() || !full.TryAcquire() || u.Current().Saturated() {
				t.Fatal("limit 0 still limits")
			}
		})
	}
}

// TestSaturatedIsNotUnhealthy: a set whose backends are all unhealthy or
// empty is not Saturated (no_healthy_backend, not overloaded), even when
// the unhealthy ones are full.
func TestSaturatedIsNotUnhealthy(t *testing.T) {
	u, err := New(Config{Name: "web", Passive: &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Hour, MaxEjectionPercent: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if u.Current().Saturated() {
		t.Fatal("empty set saturated")
	}
	u.SetStatic([]Spec{spec("a", 1)})
	u.SetMaxRequestsPerBackend(1)
	b := u.Current().Backends[0]
	b.Acquire()
	b.Done(health.Failure, "reset", time.Millisecond) // ejected
	b.Acquire()
	if !b.Full() || b.Eligible() {
		t.Fatalf("full %v, eligible %v", b.Full(), b.Eligible())
	}
	if u.Current().Saturated() {
		t.Fatal("an ejected backend makes the set saturated")
	}
}

// TestTryAcquireNoAlloc: counting a request against the per-backend
// limit does not allocate.
func TestTryAcquireNoAlloc(t *testing.T) {
	u, _ := New(Config{Name: "web"})
	defer u.Close()
	u.SetStatic([]Spec{spec("a", 1)})
	u.SetMaxRequestsPerBackend(10)
	b := u.Current().Backends[0]
	if n := testing.AllocsPerRun(1000, func() {
		if b.TryAcquire() {
			b.Done(health.Neutral, "", 0)
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

package gateway

import (
	"strconv"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestHedgeWinsOverASlowBackend: with hedge { delay = 50ms }, a GET whose
// first try goes to a slow backend gets a copy sent to the fast one, whose
// answer wins; the slow try is canceled and counts as Neutral (one failure
// would eject with consecutive_failures = 1). POSTs are never hedged.
func TestHedgeWinsOverASlowBackend(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		slow := testbackend.NewSlow(2 * time.Second)
		fast := new(testbackend.Counter)
		uc := staticUpstream("u", "/", testbackend.NewH1(t, slow), testbackend.NewH1(t, testbackend.OK(fast)))
		uc.Hedge = retry.Hedge{Delay: 50 * time.Millisecond, Max: 1}
		uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
		h := newHarnessOver(t, ingress, uc)
		const n = 10
		for i := range n {
			start := time.Now()
			if code, body := sendOne(t, h, "GET", "/hedge", strconv.Itoa(i), 0); code != 200 || body != "ok" {
				t.Fatalf("GET %d: %d %q, want the fast backend's 200", i, code, body)
			}
			if d := time.Since(start); d > time.Second {
				t.Fatalf("GET %d took %v: the hedge did not win", i, d)
			}
		}
		slowGets := slow.Total.Load()
		if slowGets == 0 {
			t.Fatal("no first try went to the slow backend")
		}
		eventually(t, 5*time.Second, func() bool { return slow.Canceled.Load() == slowGets }, "the slow tries canceled")
		if sent, won := counted(h.gw, observe.Hedged, "u", ""), counted(h.gw, observe.HedgeWon, "u", ""); sent != uint64(slowGets) || won != sent {
			t.Errorf("hedges sent %d, won %d; want %d each", sent, won, slowGets)
		}
		if fast.Total.Load() != n {
			t.Errorf("the fast backend got %d GETs, want %d (one each)", fast.Total.Load(), n)
		}
		for _, bi := range h.gw.Backends() {
			if bi.Ejected || !bi.Eligible {
				t.Errorf("a lost hedge counted against backend %s: %+v", bi.ID, bi)
			}
		}
		// POSTs go out once.
		slow.SetDelay(200 * time.Millisecond)
		before := slow.Total.Load() + fast.Total.Load()
		for i := range 4 {
			if code, _ := sendOne(t, h, "POST", "/hedge", "p"+strconv.Itoa(i), 16); code != 200 {
				t.Fatalf("POST %d: %d", i, code)
			}
		}
		if got := slow.Total.Load() + fast.Total.Load() - before; got != 4 {
			t.Errorf("4 POSTs reached the backends %d times: a POST was hedged", got)
		}
	})
}

// TestHedgesCountAgainstTheBudget: with a budget of no retries at all, no
// hedge is sent; the refusals are counted.
func TestHedgesCountAgainstTheBudget(t *testing.T) {
	slow := testbackend.NewSlow(150 * time.Millisecond)
	uc := staticUpstream("u", "/", testbackend.NewH1(t, slow), testbackend.NewH1(t, slow))
	uc.Hedge = retry.Hedge{Delay: 20 * time.Millisecond, Max: 1}
	uc.Retry = retry.Default()
	uc.Retry.Budget = retry.Budget{Percent: 0, MinConcurrency: 0}
	h := newHarness(t, uc)
	for i := range 3 {
		if code, _ := sendOne(t, h, "GET", "/", strconv.Itoa(i), 0); code != 200 {
			t.Fatalf("GET: %d", code)
		}
	}
	if slow.Total.Load() != 3 || counted(h.gw, observe.Hedged, "u", "") != 0 {
		t.Errorf("%d tries, %d hedges, with no budget", slow.Total.Load(), counted(h.gw, observe.Hedged, "u", ""))
	}
	if counted(h.gw, observe.BudgetExhausted, "u", "") != 3 {
		t.Errorf("budget exhausted counted %d, want 3", counted(h.gw, observe.BudgetExhausted, "u", ""))
	}
}

package upstream

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
)

func spec(id string, port int) Spec {
	return Spec{ID: id, Scheme: "http", Host: "127.0.0.1", Port: port, Weight: 100}
}

func TestSlowStartRampsLinearly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, err := New(Config{Name: "web", SlowStart: 10 * time.Second, Discovered: true})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		if err := u.SetDiscovered([]Spec{spec("a", 1)}); err != nil {
			t.Fatal(err)
		}
		if w := u.Current().Backends[0].Weight(); w != 100 {
			t.Fatalf("initial member weight %d, want full 100 (nothing to ramp against)", w)
		}
		if err := u.SetDiscovered([]Spec{spec("a", 1), spec("b", 2)}); err != nil {
			t.Fatal(err)
		}
		var b *Backend
		for _, x := range u.Current().Backends {
			if x.ID == "b" {
				b = x
			}
		}
		for _, step := range []struct {
			at   time.Duration
			want int
		}{{0, 1}, {2500 * time.Millisecond, 25}, {5 * time.Second, 50}, {10 * time.Second, 100}, {20 * time.Second, 100}} {
			time.Sleep(step.at - elapsed(b))
			if w := b.Weight(); w != step.want {
				t.Fatalf("at %v weight %d, want %d", step.at, w, step.want)
			}
		}
	})
}

func TestSlowStartLargeWeightLongRamp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, err := New(Config{Name: "web", SlowStart: time.Hour, Discovered: true})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		big := spec("b", 2)
		big.Weight = 65535 * 100 // Consul's largest Weights.Passing, scaled
		if err := u.SetDiscovered([]Spec{spec("a", 1)}); err != nil {
			t.Fatal(err)
		}
		if err := u.SetDiscovered([]Spec{spec("a", 1), big}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Minute)
		for _, b := range u.Current().Backends {
			if b.ID == "b" {
				if w := b.Weight(); w < big.Weight/2-100 || w > big.Weight/2+100 {
					t.Fatalf("half-way weight %d, want about %d", w, big.Weight/2)
				}
			}
		}
	})
}

func elapsed(b *Backend) time.Duration {
	since := b.warmSince.Load()
	if since == 0 {
		return 0
	}
	return time.Duration(time.Now().UnixNano() - since)
}

func TestRecoveryStartsSlowStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, err := New(Config{Name: "web", SlowStart: 10 * time.Second,
			Passive: &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Second, MaxEjectionPercent: 100}})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		u.SetStatic([]Spec{spec("a", 1)})
		b := u.Current().Backends[0]
		b.Acquire()
		b.Done(health.Failure, "reset", time.Millisecond)
		if b.Eligible() {
			t.Fatal("not ejected")
		}
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if !b.Eligible() {
			t.Fatal("not returned")
		}
		if w := b.Weight(); w != 1 {
			t.Fatalf("weight right after return %d, want 1", w)
		}
	})
}

func TestRemovedBackendDrains(t *testing.T) {
	u, err := New(Config{Name: "web", Discovered: true})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.SetDiscovered([]Spec{spec("a", 1), spec("b", 2)})
	set := u.Current()
	if set.Pending || len(set.Backends) != 2 {
		t.Fatalf("set %+v", set)
	}
	a := set.Backends[0]
	a.Acquire()
	u.SetDiscovered([]Spec{spec("b", 2)})
	if !a.Removed() || len(u.Current().Backends) != 1 {
		t.Fatal("a not removed")
	}
	if d := u.Draining(); len(d) != 1 || d[0] != a {
		t.Fatalf("draining %v, want a while its request is in flight", d)
	}
	a.Done(health.Success, "", time.Millisecond)
	if a.InFlight() != 0 || len(u.Draining()) != 0 {
		t.Fatalf("in-flight %d, draining %v", a.InFlight(), u.Draining())
	}
	// Same spec again: state is kept, not recreated.
	b := u.Current().Backends[0]
	u.SetDiscovered([]Spec{spec("b", 2)})
	if u.Current().Backends[0] != b {
		t.Fatal("unchanged backend was recreated")
	}
}

func TestSuppressedMembersAreReportedNotRouted(t *testing.T) {
	u, err := New(Config{Name: "web", Discovered: true})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	bad := spec("bad", 3)
	bad.Suppressed = "unusable impulse-scheme \"gopher\""
	if err := u.SetDiscovered([]Spec{spec("a", 1), bad}); err != nil {
		t.Fatal(err)
	}
	set := u.Current()
	if len(set.Backends) != 1 || len(set.Suppressed) != 1 || set.Suppressed[0].ID != "bad" {
		t.Fatalf("set: %d backends, suppressed %+v", len(set.Backends), set.Suppressed)
	}
	for i := 0; i < 10; i++ {
		if b, _ := u.Pick(nil); b == nil || b.ID != "a" {
			t.Fatalf("picked %v", b)
		}
	}
}

// TestClosedUpstreamReportsDraining: a closed upstream (a reload replaced or
// removed it) reports its backends with requests in flight until they end.
func TestClosedUpstreamReportsDraining(t *testing.T) {
	u, err := New(Config{Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	u.SetStatic([]Spec{spec("a", 1), spec("b", 2)})
	a := u.Current().Backends[0]
	a.Acquire()
	u.Close()
	if d := u.Draining(); len(d) != 1 || d[0] != a || !a.Removed() {
		t.Fatalf("draining %v", d)
	}
	a.Done(health.Success, "", time.Millisecond)
	if d := u.Draining(); len(d) != 0 {
		t.Fatalf("draining %v after the last request", d)
	}
}

// TestAdoptInheritsHealth: an upstream rebuilt by a reload (here for its
// policy) keeps a backend's ejection, for static and discovered backends
// alike; a backend whose address changed starts afresh.
func TestAdoptInheritsHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pas := &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: 10 * time.Second, MaxEjectionPercent: 100}
		old, err := New(Config{Name: "web", Passive: pas, Discovered: true})
		if err != nil {
			t.Fatal(err)
		}
		old.SetStatic([]Spec{spec("s", 1), spec("moved", 2)})
		old.SetDiscovered([]Spec{spec("d", 3), spec("ok", 4)})
		for _, b := range old.Current().Backends {
			if b.ID != "ok" {
				b.Acquire()
				b.Done(health.Failure, "reset", time.Millisecond)
			}
		}
		nu, err := New(Config{Name: "web", LoadBalancing: "random", Passive: pas, Discovered: true})
		if err != nil {
			t.Fatal(err)
		}
		defer nu.Close()
		if err := nu.Adopt(old); err != nil {
			t.Fatal(err)
		}
		if err := nu.SetStatic([]Spec{spec("s", 1), spec("moved", 5)}); err != nil {
			t.Fatal(err)
		}
		old.Close()
		want := map[string]bool{"s": false, "d": false, "moved": true, "ok": true}
		for _, b := range nu.Current().Backends {
			if b.Eligible() != want[b.ID] {
				t.Errorf("backend %s eligible %v after the rebuild, want %v", b.ID, b.Eligible(), want[b.ID])
			}
		}
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		for _, b := range nu.Current().Backends {
			if !b.Eligible() {
				t.Errorf("backend %s still ejected after its ejection time", b.ID)
			}
		}
	})
}

// TestWeightChangeKeepsHealth: a backend whose only change is its weight (a
// reload, or Consul Weights) keeps its ejection and starts no slow-start
// ramp; it gets the new weight.
func TestWeightChangeKeepsHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pas := &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: 10 * time.Second, MaxEjectionPercent: 100}
		u, err := New(Config{Name: "web", Passive: pas, SlowStart: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		u.SetStatic([]Spec{spec("a", 1), spec("b", 2)})
		for _, b := range u.Current().Backends {
			if b.ID == "a" {
				b.Acquire()
				b.Done(health.Failure, "reset", time.Millisecond)
			}
		}
		heavier := spec("a", 1)
		heavier.Weight = 300
		u.SetStatic([]Spec{heavier, spec("b", 2)})
		for _, b := range u.Current().Backends {
			if b.ID == "a" && (b.Eligible() || b.Weight() != 300) {
				t.Fatalf("after a weight change: eligible %v, weight %d; want ejected at full weight 300", b.Eligible(), b.Weight())
			}
		}
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		for _, b := range u.Current().Backends {
			if !b.Eligible() {
				t.Errorf("backend %s still ejected after its ejection time", b.ID)
			}
		}
	})
}

// TestPickExceptSkipsTried: a retry's pick passes over the backends already
// tried, falls back to them when no other is eligible, and is nil when none
// is; a tried backend that left the set changes nothing.
func TestPickExceptSkipsTried(t *testing.T) {
	u, err := New(Config{Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if err := u.SetStatic([]Spec{spec("a", 1), spec("b", 2), spec("c", 3)}); err != nil {
		t.Fatal(err)
	}
	byID := map[string]*Backend{}
	for _, b := range u.Current().Backends {
		byID[b.ID] = b
	}
	for range 30 {
		if b, _ := u.PickExcept(nil, []*Backend{byID["a"], byID["b"]}); b != byID["c"] {
			t.Fatalf("picked %v, want c", b)
		}
	}
	all := []*Backend{byID["a"], byID["b"], byID["c"]}
	if b, _ := u.PickExcept(nil, all); b == nil {
		t.Fatal("every backend tried: no fallback to a tried one")
	}
	gone := &Backend{Spec: spec("gone", 9)}
	seen := map[string]bool{}
	for range 30 {
		b, _ := u.PickExcept(nil, []*Backend{gone})
		seen[b.ID] = true
	}
	if len(seen) != 3 {
		t.Fatalf("a tried backend outside the set narrowed the pick to %v", seen)
	}
	if a := testing.AllocsPerRun(100, func() { u.PickExcept(nil, all[:1]) }); a != 0 {
		t.Errorf("PickExcept: %v allocs, want 0", a)
	}
}

// TestEjectionNeverEmptiesTheUpstream: with every member ejected, a first
// try still goes to the one ejected longest ago, never nowhere (a 503 with
// healthy-looking backends); a retry (PickExcept of another) finds none;
// a member the active check rules out is never fallen back to.
func TestEjectionNeverEmptiesTheUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, err := New(Config{Name: "web",
			Passive: &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		u.SetStatic([]Spec{spec("a", 1), spec("b", 1), spec("c", 1)})
		byID := map[string]*Backend{}
		for _, b := range u.Current().Backends {
			byID[b.ID] = b
		}
		for _, id := range []string{"b", "a", "c"} { // b ejected first, then a, then c
			b := byID[id]
			b.Acquire()
			b.Done(health.Failure, "connect", 0)
			if b.Eligible() || b.Health.EjectedSince().IsZero() {
				t.Fatalf("%s not ejected", id)
			}
			time.Sleep(time.Second)
		}
		for range 10 {
			if b, _ := u.Pick(nil); b != byID["b"] {
				t.Fatalf("picked %v with every member ejected, want b (ejected longest ago)", b)
			}
		}
		if b, _ := u.PickExcept(nil, []*Backend{byID["b"]}); b != nil {
			t.Fatalf("a retry fell back to the ejected %s", b.ID)
		}
		byID["b"].Acquire()
		byID["b"].Done(health.Success, "", time.Millisecond) // answers again: stays ejected until its time is up
		time.Sleep(time.Minute)
		synctest.Wait()
		for _, b := range byID {
			if !b.Eligible() || !b.Health.EjectedSince().IsZero() {
				t.Fatalf("%s still ejected after its ejection time", b.ID)
			}
		}
	})
}

// TestStalledBackendIsSkipped: with outlier detection, a backend holding
// consecutive_failures requests sent since its last answer is skipped
// while another can take the request, taken again when it answers or holds
// none, and picked anyway when every backend is stalled.
func TestStalledBackendIsSkipped(t *testing.T) {
	u, err := New(Config{Name: "web",
		Passive: &health.PassiveConfig{ConsecutiveFailures: 3, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	u.SetStatic([]Spec{spec("a", 1), spec("b", 1)})
	byID := map[string]*Backend{}
	for _, b := range u.Current().Backends {
		byID[b.ID] = b
	}
	hole, other := byID["a"], byID["b"]
	for range 3 {
		if !hole.TryAcquire() {
			t.Fatal("TryAcquire")
		}
	}
	if hole.Stalled() {
		t.Fatal("stalled before any other backend answered: no evidence yet")
	}
	if ok, over := hole.Claim(); !ok || over != Cold {
		t.Fatalf("a fourth claim before any answer: %v %v, want Cold", ok, over)
	}
	select {
	case <-u.FirstAnswer():
		t.Fatal("FirstAnswer closed before any answer")
	default:
	}
	hole.Unclaim()
	other.Acquire()
	other.Answered()
	other.Done(health.Success, "", time.Millisecond)
	if !hole.Stalled() {
		t.Fatal("three requests without an answer while another answered: not stalled")
	}
	<-u.FirstAnswer()
	if ok, over := hole.Claim(); !ok || over != Behind {
		t.Fatalf("a claim beyond the limit while stalled: %v %v, want Behind", ok, over)
	}
	hole.Unclaim()
	for range 20 {
		if b, _ := u.Pick(nil); b != other {
			t.Fatalf("picked %v, want the backend that answers", b.ID)
		}
	}
	other.Acquire()
	other.Acquire()
	other.Acquire() // b holds three since its last answer too: the pick still finds a backend
	if b, _ := u.Pick(nil); b == nil {
		t.Fatal("every backend stalled: no pick")
	}
	hole.Answered()
	if hole.Stalled() {
		t.Fatal("answered, still stalled")
	}
	for range 3 {
		hole.Done(health.Neutral, "", 0)
		other.Done(health.Neutral, "", 0)
	}
	other.Answered()
	// Holding none, a backend is never stalled, whatever it sent before.
	for range 3 {
		hole.Acquire()
		hole.Done(health.Neutral, "", 0)
	}
	if hole.Stalled() {
		t.Fatal("stalled while holding no request")
	}
	// What it was sent unanswered ended (refused, timed out): once it
	// holds none, a claim starts from nothing, as for a backend back from
	// an ejection.
	for range 5 {
		hole.Acquire()
	}
	for range 5 {
		hole.Done(health.Neutral, "", 0)
	}
	if ok, over := hole.Claim(); !ok || over != Within {
		t.Fatalf("a claim after its unanswered requests ended: %v %v, want Within", ok, over)
	}
	hole.Unclaim()
	// A member that joins later is not behind for what the others
	// answered before.
	u.SetStatic([]Spec{spec("a", 1), spec("b", 1), spec("c", 1)})
	var late *Backend
	for _, b := range u.Current().Backends {
		if b.ID == "c" {
			late = b
		}
	}
	for range 3 {
		late.Acquire()
	}
	if late.Stalled() {
		t.Fatal("a new member is behind for answers from before it joined")
	}

	// A backend that fails at once (refuses) is not silent: its failures
	// end an upstream's cold start.
	fresh, _ := New(Config{Name: "fresh",
		Passive: &health.PassiveConfig{ConsecutiveFailures: 3, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}})
	defer fresh.Close()
	fresh.SetStatic([]Spec{spec("r", 1), spec("s", 1)})
	r := fresh.Current().Backends[0]
	for range 4 {
		r.Acquire() // held: a fourth over the limit before any outcome
	}
	if ok, over := r.Claim(); !ok || over != Cold {
		t.Fatalf("before any outcome: %v %v, want Cold", ok, over)
	}
	r.Unclaim()
	r.Done(health.Failure, "connect", 0)
	<-fresh.FirstAnswer()
	if ok, over := r.Claim(); !ok || over != Within {
		t.Fatalf("after a failure: %v %v, want Within (not cold, and nothing answered: not behind)", ok, over)
	}
	off, _ := New(Config{Name: "off"})
	defer off.Close()
	off.SetStatic([]Spec{spec("x", 1)})
	x := off.Current().Backends[0]
	for range 10 {
		x.Acquire()
	}
	if x.Stalled() {
		t.Fatal("stalled without outlier detection")
	}
}

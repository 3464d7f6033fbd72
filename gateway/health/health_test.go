package health

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

type recorder struct {
	mu sync.Mutex
	ts []Transition
}

func (r *recorder) add(t Transition) { r.mu.Lock(); r.ts = append(r.ts, t); r.mu.Unlock() }

// TestB25ThresholdsCountConsecutiveResults: alternating results never reach
// a threshold; three failures in a row do, then two passes recover.
func TestB25ThresholdsCountConsecutiveResults(t *testing.T) {
	s := New(&ActiveConfig{HealthyThreshold: 2, UnhealthyThreshold: 3}, nil, nil, nil)
	s.ObserveCheck(true, "")
	for i := 0; i < 60; i++ {
		s.ObserveCheck(i%2 == 1, "status 500")
		if st, _, _ := s.Snapshot(); st != Healthy || !s.Eligible() {
			t.Fatalf("step %d: %v after alternating results", i, st)
		}
	}
	steps := []struct {
		ok   bool
		want Status
	}{{false, Healthy}, {false, Healthy}, {false, Unhealthy}, {true, Unhealthy}, {true, Healthy}}
	for i, st := range steps {
		s.ObserveCheck(st.ok, "status 500")
		if got, _, _ := s.Snapshot(); got != st.want {
			t.Fatalf("step %d: %v, want %v", i, got, st.want)
		}
		if s.Eligible() != (st.want == Healthy) {
			t.Fatalf("step %d: eligible=%v", i, s.Eligible())
		}
	}
}

func TestB25PassiveConsecutiveFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		s := New(nil, &PassiveConfig{ConsecutiveFailures: 3, BaseEjectionTime: 10 * time.Second}, nil, rec.add)
		for i := 0; i < 60; i++ {
			if i%2 == 0 {
				s.Observe(Failure, "status 503")
			} else {
				s.Observe(Success, "")
			}
		}
		s.Observe(Neutral, "")
		if !s.Eligible() {
			t.Fatal("ejected by alternating results")
		}
		for i := 0; i < 3; i++ {
			s.Observe(Failure, "reset")
		}
		if s.Eligible() {
			t.Fatal("not ejected after three consecutive failures")
		}
		time.Sleep(10*time.Second + time.Millisecond)
		if !s.Eligible() {
			t.Fatal("not back after the ejection time")
		}
		// Second ejection lasts twice as long.
		for i := 0; i < 3; i++ {
			s.Observe(Failure, "reset")
		}
		time.Sleep(10*time.Second + time.Millisecond)
		if s.Eligible() {
			t.Fatal("second ejection ended after one base time")
		}
		time.Sleep(10 * time.Second)
		if !s.Eligible() {
			t.Fatal("second ejection did not end after two base times")
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.ts) != 4 || !rec.ts[0].Ejected || rec.ts[0].Reason != "reset" || !rec.ts[1].Returned {
			t.Fatalf("transitions %+v", rec.ts)
		}
	})
}

func TestMaxEjectionPercent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &Budget{Size: func() int { return 4 }}
		cfg := &PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Second, MaxEjectionPercent: 50}
		var states []*State
		for i := 0; i < 4; i++ {
			states = append(states, New(nil, cfg, b, nil))
		}
		for _, s := range states {
			s.Observe(Failure, "reset")
		}
		ejected := 0
		for _, s := range states {
			if !s.Eligible() {
				ejected++
			}
		}
		if ejected != 2 || b.Ejected() != 2 {
			t.Fatalf("%d ejected (budget %d), want 2 of 4 at 50%%", ejected, b.Ejected())
		}
		time.Sleep(2 * time.Second)
		if b.Ejected() != 0 {
			t.Fatalf("budget not released: %d", b.Ejected())
		}
		for _, s := range states {
			s.Close()
		}
	})
}

func TestUnknownBeforeFirstCheck(t *testing.T) {
	if New(&ActiveConfig{HealthyThreshold: 2, UnhealthyThreshold: 2}, nil, nil, nil).Eligible() {
		t.Fatal("unknown backend eligible with UnknownIsHealthy=false")
	}
	s := New(&ActiveConfig{HealthyThreshold: 2, UnhealthyThreshold: 2, UnknownIsHealthy: true}, nil, nil, nil)
	if !s.Eligible() {
		t.Fatal("unknown backend not eligible with UnknownIsHealthy=true")
	}
	s.ObserveCheck(false, "timeout")
	s.ObserveCheck(false, "timeout")
	if st, reason, _ := s.Snapshot(); st != Unhealthy || reason != "timeout" || s.Eligible() {
		t.Fatalf("%v %q", st, reason)
	}
}

// TestHangingProbeIsTimeout: a probe that never answers counts as a timeout
// failure at each interval.
func TestHangingProbeIsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(&ActiveConfig{Interval: time.Second, Timeout: 100 * time.Millisecond, HealthyThreshold: 1, UnhealthyThreshold: 2, UnknownIsHealthy: true}, nil, nil, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			RunChecks(ctx, ActiveConfig{Interval: time.Second, Timeout: 100 * time.Millisecond}, func(ctx context.Context) (bool, string) {
				<-ctx.Done()
				return true, ""
			}, s)
			close(done)
		}()
		time.Sleep(3 * time.Second)
		if st, reason, _ := s.Snapshot(); st != Unhealthy || reason != "timeout" {
			t.Fatalf("%v %q after hanging probes", st, reason)
		}
		cancel()
		<-done
	})
}

// TestInheritKeepsStatusAndEjection: a state rebuilt by a reload takes over
// the active status and a running ejection, which ends when it would have,
// and reports no transition that did not happen.
func TestInheritKeepsStatusAndEjection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pas := &PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: 10 * time.Second, MaxEjectionPercent: 100}
		old := New(&ActiveConfig{HealthyThreshold: 2, UnhealthyThreshold: 1, UnknownIsHealthy: true}, pas, &Budget{Size: func() int { return 1 }}, nil)
		old.ObserveCheck(false, "connect")
		old.Observe(Failure, "reset")
		time.Sleep(4 * time.Second)

		var transitions []Transition
		budget := &Budget{Size: func() int { return 1 }}
		s := New(&ActiveConfig{HealthyThreshold: 3, UnhealthyThreshold: 1, UnknownIsHealthy: true}, pas, budget,
			func(tr Transition) { transitions = append(transitions, tr) })
		s.Inherit(old)
		old.Close()
		if s.Eligible() {
			t.Fatal("the rebuilt state admits a backend that is unhealthy and ejected")
		}
		if st, reason, till := s.Snapshot(); st != Unhealthy || reason != "connect" || !till.Equal(time.Now().Add(6*time.Second)) {
			t.Fatalf("inherited %v %q ejected till %v", st, reason, till)
		}
		if budget.Ejected() != 1 {
			t.Fatalf("budget holds %d ejections, want 1", budget.Ejected())
		}
		time.Sleep(6*time.Second + time.Millisecond)
		synctest.Wait()
		if _, _, till := s.Snapshot(); !till.IsZero() || budget.Ejected() != 0 {
			t.Fatalf("the ejection did not end on time (till %v, budget %d)", till, budget.Ejected())
		}
		s.ObserveCheck(true, "")
		s.ObserveCheck(true, "")
		if s.Eligible() {
			t.Fatal("healthy after 2 passes; the new healthy_threshold is 3")
		}
		s.ObserveCheck(true, "")
		if !s.Eligible() {
			t.Fatal("not healthy after 3 passes")
		}
		if len(transitions) != 2 || !transitions[0].Returned || transitions[1].To != Healthy {
			t.Fatalf("transitions %+v, want the return then unhealthy → healthy", transitions)
		}
	})
}

// TestInheritedCheckIsNotRepeated: the checker of an inherited state waits
// for the interval since the last check instead of checking at once, so a
// reload never adds a check that counts towards the thresholds.
func TestInheritedCheckIsNotRepeated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := ActiveConfig{Interval: 10 * time.Second, Timeout: time.Second, HealthyThreshold: 1, UnhealthyThreshold: 1}
		old := New(&cfg, nil, nil, nil)
		old.ObserveCheck(true, "")
		time.Sleep(5 * time.Second)
		s := New(&cfg, nil, nil, nil)
		s.Inherit(old)
		var probes atomic.Int64
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go RunChecks(ctx, cfg, func(context.Context) (bool, string) { probes.Add(1); return true, "" }, s)
		time.Sleep(3900 * time.Millisecond) // the next check is due 9–11 s after the last
		synctest.Wait()
		if n := probes.Load(); n != 0 {
			t.Fatalf("%d checks within the interval after an inherited one", n)
		}
		time.Sleep(2200 * time.Millisecond)
		synctest.Wait()
		if n := probes.Load(); n != 1 {
			t.Fatalf("%d checks one interval after the inherited one, want 1", n)
		}
		cancel()
	})
}

// TestFailingTracksTheLastOutcome: Failing reports the last request's
// outcome, with or without outlier detection; neutral outcomes say
// nothing.
func TestFailingTracksTheLastOutcome(t *testing.T) {
	for _, passive := range []*PassiveConfig{nil, {ConsecutiveFailures: 5, BaseEjectionTime: time.Second, MaxEjectionPercent: 100}} {
		s := New(nil, passive, nil, nil)
		steps := []struct {
			o    Outcome
			want bool
		}{{Success, false}, {Failure, true}, {Neutral, true}, {Failure, true}, {Success, false}, {Neutral, false}}
		for i, st := range steps {
			s.Observe(st.o, "x")
			if s.Failing() != st.want {
				t.Fatalf("passive %v, step %d (%v): Failing %v, want %v", passive != nil, i, st.o, s.Failing(), st.want)
			}
		}
		s.Close()
	}
}

// TestStrikeCountsAnswersInARow: Strike lets consecutive_failures 5xx
// answers in a row through and reports the ones beyond (and those of an
// ejected backend), ahead of their Observe; a success starts over; without
// outlier detection it never reports one.
func TestStrikeCountsAnswersInARow(t *testing.T) {
	s := New(nil, &PassiveConfig{ConsecutiveFailures: 3, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}, nil, nil)
	defer s.Close()
	var got []bool
	for range 5 {
		got = append(got, s.Strike())
	}
	if fmt.Sprint(got) != "[false false false true true]" {
		t.Fatalf("strikes %v", got)
	}
	s.Observe(Success, "")
	if s.Strike() {
		t.Fatal("a strike after a success is beyond the limit")
	}
	for range 3 {
		s.Observe(Failure, "status 503")
	}
	if !s.Strike() {
		t.Fatal("an ejected backend's 5xx is not reported")
	}
	off := New(nil, nil, nil, nil)
	for range 10 {
		if off.Strike() {
			t.Fatal("Strike without outlier detection")
		}
	}
}

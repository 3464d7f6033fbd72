package retry

import (
	"net/http"
	"testing"
	"time"
)

// load is a fixed count of requests in flight to the upstream.
type load int64

func (l load) InFlight() int64 { return int64(l) }

func yes() bool { return true }
func no() bool  { return false }

// TestStateRetry is the decision table of a failed try: the policy first,
// then a backend, the budget and the backend's slot, in that order, and a
// slot held only by an Again.
func TestStateRetry(t *testing.T) {
	get := func(status int, failure Condition) Result {
		return Result{Status: status, Failure: failure, Method: http.MethodGet, BodyKept: true}
	}
	all := ConnectFailure | RefusedStream | Reset | Status502 | Status503 | Status504
	for _, tc := range []struct {
		name        string
		on          Condition
		budget      *Budget
		load        load
		res         Result
		find, claim func() bool
		want        Verdict
		cond        Condition
		findCalled  bool
	}{
		{name: "connect failure retried", res: get(0, ConnectFailure), find: yes, claim: yes, want: Again, cond: ConnectFailure, findCalled: true},
		{name: "answer not covered", res: get(200, 0), find: yes, claim: yes, want: Stop},
		{name: "503 off by default", res: get(503, 0), find: yes, claim: yes, want: Stop, cond: Status503},
		{name: "503 on", on: all, res: get(503, 0), find: yes, claim: yes, want: Again, cond: Status503, findCalled: true},
		{name: "reset of a POST", on: all, res: Result{Failure: Reset, Method: http.MethodPost, BodyKept: true}, find: yes, claim: yes, want: Stop, cond: Reset},
		{name: "expired", res: Result{Failure: ConnectFailure, Method: http.MethodGet, BodyKept: true, Expired: true}, find: yes, claim: yes, want: Stop, cond: ConnectFailure},
		{name: "started", on: all, res: Result{Failure: Reset, Method: http.MethodGet, BodyKept: true, Started: true}, find: yes, claim: yes, want: Stop, cond: Reset},
		{name: "body lost", res: Result{Failure: ConnectFailure, Method: http.MethodPost}, find: yes, claim: yes, want: Stop, cond: ConnectFailure},
		{name: "no other backend", res: get(0, ConnectFailure), find: no, claim: yes, want: NoBackend, cond: ConnectFailure, findCalled: true},
		{name: "budget spent", budget: &Budget{}, res: get(0, ConnectFailure), find: yes, claim: yes, want: NoBudget, cond: ConnectFailure, findCalled: true},
		{name: "budget from load", budget: &Budget{Percent: 20}, load: 10, res: get(0, ConnectFailure), find: yes, claim: yes, want: Again, cond: ConnectFailure, findCalled: true},
		{name: "backend full", res: get(0, ConnectFailure), find: yes, claim: no, want: NoBackend, cond: ConnectFailure, findCalled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Default()
			if tc.on != 0 {
				p.On = tc.on
			}
			if tc.budget != nil {
				p.Budget = *tc.budget
			}
			s, err := NewSettings(p, Hedge{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			st := s.Start(tc.load)
			st.rnd = func() uint64 { return 1 << 63 } // half the ceiling
			called := false
			find := func() bool { called = true; return tc.find() }
			d := st.Retry(tc.res, find, tc.claim)
			if d.Verdict != tc.want || d.Condition != tc.cond || called != tc.findCalled {
				t.Fatalf("decision %+v (find called %v), want %v %v (find called %v)", d, called, tc.want, tc.cond, tc.findCalled)
			}
			held := int64(0)
			if d.Verdict == Again {
				held = 1
				if d.Slot == 0 || d.Wait != p.Backoff/2 || st.Tries() != 2 {
					t.Errorf("again: slot %d, wait %v (want %v), tries %d", d.Slot, d.Wait, p.Backoff/2, st.Tries())
				}
			} else if st.Tries() != 1 {
				t.Errorf("tries %d after %v", st.Tries(), d.Verdict)
			}
			if s.InFlight() != held {
				t.Errorf("budget holds %d, want %d", s.InFlight(), held)
			}
			st.Close()
			if s.InFlight() != 0 {
				t.Errorf("budget holds %d after Close", s.InFlight())
			}
		})
	}
}

// TestStateAttemptsAndBudget: the tries are bounded by attempts, each retry
// holds one slot until released, a slot is given back once however often
// it is released, and Close returns the rest.
func TestStateAttemptsAndBudget(t *testing.T) {
	p := Default()
	p.Attempts = 3
	p.Budget = Budget{Percent: 0, MinConcurrency: 2}
	s, _ := NewSettings(p, Hedge{}, nil)
	fail := Result{Failure: ConnectFailure, Method: http.MethodPost}
	fail.BodyKept = true

	a := s.Start(load(0))
	d1 := a.Retry(fail, yes, yes)
	d2 := a.Retry(fail, yes, yes)
	d3 := a.Retry(fail, yes, yes)
	if d1.Verdict != Again || d2.Verdict != Again || d3.Verdict != Stop {
		t.Fatalf("verdicts %v %v %v, want again, again, stop (attempts 3)", d1.Verdict, d2.Verdict, d3.Verdict)
	}
	if d1.Wait >= p.Backoff || d2.Wait >= 2*p.Backoff {
		t.Errorf("waits %v %v beyond the back-off ceilings", d1.Wait, d2.Wait)
	}
	if s.InFlight() != 2 {
		t.Fatalf("budget %d, want 2", s.InFlight())
	}
	b := s.Start(load(0))
	if d := b.Retry(fail, yes, yes); d.Verdict != NoBudget {
		t.Fatalf("a third retry in flight: %v, want no budget (min_retry_concurrency 2)", d.Verdict)
	}
	a.Release(d1.Slot)
	a.Release(d1.Slot)
	if s.InFlight() != 1 {
		t.Fatalf("budget %d after releasing one slot twice, want 1", s.InFlight())
	}
	d := b.Retry(fail, yes, yes)
	if d.Verdict != Again {
		t.Fatalf("after a release: %v", d.Verdict)
	}
	a.Close()
	b.Close()
	b.Release(d.Slot) // after Close: nothing left to give back
	if s.InFlight() != 0 {
		t.Fatalf("budget %d after Close, want 0", s.InFlight())
	}
	// A reload's settings share the count.
	next, _ := NewSettings(p, Hedge{}, s)
	c := next.Start(load(0))
	c.Retry(fail, yes, yes)
	if s.InFlight() != 1 {
		t.Errorf("the old generation sees %d, want the shared 1", s.InFlight())
	}
	c.Close()
}

// TestStateHedge: copies up to hedge.max, each holding a slot, refused by
// the budget and by the lack of another backend, never beyond max.
func TestStateHedge(t *testing.T) {
	p := Default()
	s, _ := NewSettings(p, Hedge{Delay: time.Millisecond, Max: 2}, nil)
	st := s.Start(load(0))
	if d := st.Hedge(no, yes); d.Verdict != NoBackend {
		t.Fatalf("no backend: %v", d.Verdict)
	}
	d1, d2 := st.Hedge(yes, yes), st.Hedge(yes, yes)
	if d1.Verdict != Again || d2.Verdict != Again || d1.Slot == d2.Slot || d1.Wait != 0 {
		t.Fatalf("copies: %+v %+v", d1, d2)
	}
	if d := st.Hedge(yes, yes); d.Verdict != Stop {
		t.Fatalf("beyond max: %v", d.Verdict)
	}
	if s.InFlight() != 2 {
		t.Fatalf("budget %d, want 2", s.InFlight())
	}
	// A hedge leaves the retry's tries alone.
	if st.Tries() != 1 {
		t.Errorf("tries %d", st.Tries())
	}
	st.Close()
	p.Budget = Budget{}
	s, _ = NewSettings(p, Hedge{Delay: time.Millisecond, Max: 2}, nil)
	st = s.Start(load(100))
	if d := st.Hedge(yes, yes); d.Verdict != NoBudget {
		t.Fatalf("no budget: %v", d.Verdict)
	}
	st.Close()
	if s.InFlight() != 0 {
		t.Errorf("budget %d", s.InFlight())
	}
	off, _ := NewSettings(p, Hedge{}, nil)
	st = off.Start(load(0))
	if d := st.Hedge(yes, yes); d.Verdict != Stop {
		t.Errorf("hedging off: %v", d.Verdict)
	}
}

// TestStateSlotsBound: a request can never hold more slots than its
// tries and copies, and slots past the bound are refused, not wrapped.
func TestStateSlotsBound(t *testing.T) {
	p := Default()
	p.Attempts = MaxAttempts
	p.Budget = Budget{Percent: 100, MinConcurrency: 100}
	s, _ := NewSettings(p, Hedge{Delay: time.Millisecond, Max: MaxHedges}, nil)
	st := s.Start(load(0))
	res := Result{Failure: ConnectFailure, Method: http.MethodGet, BodyKept: true}
	n := 0
	for st.Retry(res, yes, yes).Verdict == Again {
		n++
	}
	for st.Hedge(yes, yes).Verdict == Again {
		n++
	}
	if n != MaxAttempts-1+MaxHedges || s.InFlight() != int64(n) {
		t.Fatalf("%d slots, %d held", n, s.InFlight())
	}
	st.Close()
	if s.InFlight() != 0 {
		t.Fatalf("budget %d after Close", s.InFlight())
	}
}

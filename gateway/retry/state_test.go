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

// healthy and none are Finds: a backend whose last request did not fail,
// and no backend at all; failingOne finds one whose last request failed.
func healthy() (bool, bool)    { return true, false }
func none() (bool, bool)       { return false, false }
func failingOne() (bool, bool) { return true, true }

// TestStateRetry is the decision table of a failed try: the policy first,
// then a backend, the budget and the backend's slot, in that order; a
// slot (and a back-off) only for a retry the budget pays for: not the
// retry of a try the backend never saw to a backend that is not failing.
func TestStateRetry(t *testing.T) {
	get := func(status int, failure Condition) Result {
		return Result{Status: status, Failure: failure, Method: http.MethodGet, BodyKept: true}
	}
	all := ConnectFailure | RefusedStream | Reset | Status502 | Status503 | Status504
	for _, tc := range []struct {
		name       string
		on         Condition
		budget     *Budget
		load       load
		res        Result
		find       Find
		claim      func() bool
		want       Verdict
		cond       Condition
		findCalled bool
		paid       bool // the retry holds a slot and waits
	}{
		{name: "connect failure to a healthy backend: free, at once", res: get(0, ConnectFailure), find: healthy, claim: yes, want: Again, cond: ConnectFailure, findCalled: true},
		{name: "refused stream to a healthy backend: free", res: get(0, RefusedStream), find: healthy, claim: yes, want: Again, cond: RefusedStream, findCalled: true},
		{name: "connect failure to a failing backend: paid", res: get(0, ConnectFailure), find: failingOne, claim: yes, want: Again, cond: ConnectFailure, findCalled: true, paid: true},
		{name: "answer not covered", res: get(200, 0), find: healthy, claim: yes, want: Stop},
		{name: "503 off by default", res: get(503, 0), find: healthy, claim: yes, want: Stop, cond: Status503},
		{name: "503 on: paid", on: all, res: get(503, 0), find: healthy, claim: yes, want: Again, cond: Status503, findCalled: true, paid: true},
		{name: "reset on: paid", on: all, res: get(0, Reset), find: healthy, claim: yes, want: Again, cond: Reset, findCalled: true, paid: true},
		{name: "reset at a backend behind, GET: free", res: Result{Failure: Reset, Method: http.MethodGet, BodyKept: true, Behind: true}, find: healthy, claim: yes, want: Again, cond: Reset, findCalled: true},
		{name: "reset at a backend behind, to a failing one: paid", res: Result{Failure: Reset, Method: http.MethodGet, BodyKept: true, Behind: true}, find: failingOne, claim: yes, want: Again, cond: Reset, findCalled: true, paid: true},
		{name: "reset at a backend behind, POST: not retried", res: Result{Failure: Reset, Method: http.MethodPost, BodyKept: true, Behind: true}, find: healthy, claim: yes, want: Stop, cond: Reset},
		{name: "reset of a POST", on: all, res: Result{Failure: Reset, Method: http.MethodPost, BodyKept: true}, find: healthy, claim: yes, want: Stop, cond: Reset},
		{name: "expired", res: Result{Failure: ConnectFailure, Method: http.MethodGet, BodyKept: true, Expired: true}, find: healthy, claim: yes, want: Stop, cond: ConnectFailure},
		{name: "started", on: all, res: Result{Failure: Reset, Method: http.MethodGet, BodyKept: true, Started: true}, find: healthy, claim: yes, want: Stop, cond: Reset},
		{name: "body lost", res: Result{Failure: ConnectFailure, Method: http.MethodPost}, find: healthy, claim: yes, want: Stop, cond: ConnectFailure},
		{name: "no other backend", res: get(0, ConnectFailure), find: none, claim: yes, want: NoBackend, cond: ConnectFailure, findCalled: true},
		{name: "budget spent, failing backend", budget: &Budget{}, res: get(0, ConnectFailure), find: failingOne, claim: yes, want: NoBudget, cond: ConnectFailure, findCalled: true},
		{name: "budget spent, healthy backend: free", budget: &Budget{}, res: get(0, ConnectFailure), find: healthy, claim: yes, want: Again, cond: ConnectFailure, findCalled: true},
		{name: "budget spent, 503", on: all, budget: &Budget{}, res: get(503, 0), find: healthy, claim: yes, want: NoBudget, cond: Status503, findCalled: true},
		{name: "budget from load", budget: &Budget{Percent: 20}, load: 10, res: get(0, ConnectFailure), find: failingOne, claim: yes, want: Again, cond: ConnectFailure, findCalled: true, paid: true},
		{name: "backend full", res: get(0, ConnectFailure), find: healthy, claim: no, want: NoBackend, cond: ConnectFailure, findCalled: true},
		{name: "503 of an ejected backend, GET: free", res: Result{Status: 503, Method: http.MethodGet, BodyKept: true, Ejected: true}, find: healthy, claim: yes, want: Again, cond: Outlier, findCalled: true},
		{name: "500 of an ejected backend, PUT: free", res: Result{Status: 500, Method: http.MethodPut, BodyKept: true, Ejected: true}, find: healthy, claim: yes, want: Again, cond: Outlier, findCalled: true},
		{name: "503 of an ejected backend, POST: relayed", res: Result{Status: 503, Method: http.MethodPost, BodyKept: true, Ejected: true}, find: healthy, claim: yes, want: Stop, cond: Outlier},
		{name: "503 of an ejected backend, to a failing one: paid", res: Result{Status: 503, Method: http.MethodGet, BodyKept: true, Ejected: true}, find: failingOne, claim: yes, want: Again, cond: Outlier, findCalled: true, paid: true},
		{name: "backend full, paid: slot given back", res: get(0, ConnectFailure), find: failingOne, claim: no, want: NoBackend, cond: ConnectFailure, findCalled: true},
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
			find := func() (bool, bool) { called = true; return tc.find() }
			d := st.Retry(tc.res, find, tc.claim)
			if d.Verdict != tc.want || d.Condition != tc.cond || called != tc.findCalled {
				t.Fatalf("decision %+v (find called %v), want %v %v (find called %v)", d, called, tc.want, tc.cond, tc.findCalled)
			}
			held := int64(0)
			if d.Verdict == Again {
				if tc.paid {
					held = 1
				}
				wantWait := time.Duration(0)
				if tc.paid {
					wantWait = p.Backoff / 2
				}
				if (d.Slot != 0) != tc.paid || d.Wait != wantWait || st.Tries() != 2 {
					t.Errorf("again: slot %d, wait %v (want %v), tries %d", d.Slot, d.Wait, wantWait, st.Tries())
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
	d1 := a.Retry(fail, failingOne, yes)
	d2 := a.Retry(fail, failingOne, yes)
	d3 := a.Retry(fail, failingOne, yes)
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
	if d := b.Retry(fail, failingOne, yes); d.Verdict != NoBudget {
		t.Fatalf("a third retry in flight: %v, want no budget (min_retry_concurrency 2)", d.Verdict)
	}
	a.Release(d1.Slot)
	a.Release(d1.Slot)
	if s.InFlight() != 1 {
		t.Fatalf("budget %d after releasing one slot twice, want 1", s.InFlight())
	}
	d := b.Retry(fail, failingOne, yes)
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
	c.Retry(fail, failingOne, yes)
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
	if d := st.Hedge(none, yes); d.Verdict != NoBackend {
		t.Fatalf("no backend: %v", d.Verdict)
	}
	d1, d2 := st.Hedge(healthy, yes), st.Hedge(healthy, yes)
	if d1.Verdict != Again || d2.Verdict != Again || d1.Slot == d2.Slot || d1.Wait != 0 {
		t.Fatalf("copies: %+v %+v", d1, d2)
	}
	if d := st.Hedge(healthy, yes); d.Verdict != Stop {
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
	if d := st.Hedge(healthy, yes); d.Verdict != NoBudget {
		t.Fatalf("no budget: %v", d.Verdict)
	}
	st.Close()
	if s.InFlight() != 0 {
		t.Errorf("budget %d", s.InFlight())
	}
	off, _ := NewSettings(p, Hedge{}, nil)
	st = off.Start(load(0))
	if d := st.Hedge(healthy, yes); d.Verdict != Stop {
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
	for st.Retry(res, failingOne, yes).Verdict == Again {
		n++
	}
	for st.Hedge(healthy, yes).Verdict == Again {
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

// TestSettingsHolds: settings hold the policies they were made from, the
// zero policy standing for Default(), and no other.
func TestSettingsHolds(t *testing.T) {
	h := Hedge{Delay: 50 * time.Millisecond, Max: 1}
	s, err := NewSettings(Policy{}, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Holds(Policy{}, h) || !s.Holds(Default(), h) {
		t.Error("settings made from the zero policy do not hold it or Default()")
	}
	other := Default()
	other.Attempts++
	if s.Holds(other, h) || s.Holds(Policy{}, Hedge{}) {
		t.Error("settings hold another policy")
	}
}

package retry

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Settings are one upstream's attempt settings in one route-table
// generation: its retry policy, its hedging and the count of retries in
// flight its budget keeps. Every generation of one upstream shares that
// count (NewSettings' prev), so a reload neither forgets nor doubles the
// retries running. Settings are immutable once made; per request, Start
// returns the State that takes and gives back budget slots.
type Settings struct {
	policy Policy
	hedge  Hedge
	// retries counts the retries and hedges in flight to the upstream.
	retries *atomic.Int64
}

// NewSettings validates p and h and returns the settings carrying prev's
// budget count (prev nil: a count from 0). A zero p stands for Default().
// Errors: Policy.Validate's and Hedge.Validate's.
func NewSettings(p Policy, h Hedge, prev *Settings) (*Settings, error) {
	if p == (Policy{}) {
		p = Default()
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	s := &Settings{policy: p, hedge: h, retries: new(atomic.Int64)}
	if prev != nil {
		s.retries = prev.retries
	}
	return s, nil
}

// Holds reports whether s are what NewSettings(p, h, s) returns, but for
// being another value: an Apply that changes neither policy keeps s.
func (s *Settings) Holds(p Policy, h Hedge) bool {
	if p == (Policy{}) {
		p = Default()
	}
	return s.policy == p && s.hedge == h
}

// DefaultSettings are Default() without hedging, with a budget count of
// their own: for a request routed to an upstream a reload removed.
func DefaultSettings() *Settings {
	s, _ := NewSettings(Policy{}, Hedge{}, nil)
	return s
}

// Policy is the retry policy.
func (s *Settings) Policy() *Policy { return &s.policy }

// Hedge is the hedge policy.
func (s *Settings) Hedge() Hedge { return s.hedge }

// InFlight is the number of budget slots held now: retries and hedged
// copies in flight to the upstream, 0 when nothing is retried.
func (s *Settings) InFlight() int64 { return s.retries.Load() }

// Load is what the budget weighs retries against (Budget.Limit): the
// requests admitted to the upstream, those in back-off between tries
// included (the gateway passes the upstream's concurrency limiter), as
// Envoy's retry budget counts active requests. Counting only requests at
// backends would hold the budget at min_retry_concurrency for fast
// backends, and a few concurrent clients would exhaust it.
type Load interface{ InFlight() int64 }

// Start begins one request's attempts against the upstream whose
// backends load counts. The State belongs to the request's goroutine.
func (s *Settings) Start(load Load) State {
	return State{s: s, load: load, tries: 1}
}

// Slot is a budget slot a retry or a hedged copy holds while its try
// runs; 0 is none. State.Release gives it back once, State.Close every
// one still held.
type Slot uint8

// Verdict is what a decision tells the attempt loop to do.
type Verdict uint8

const (
	// Stop: the try's outcome is final (the policy does not cover it,
	// no try is left, the response started, the client left).
	Stop Verdict = iota
	// Again: send another try to the backend the loop found and claimed,
	// after Decision.Wait; it holds Decision.Slot until it ends.
	Again
	// NoBudget: the policy would try again but the upstream's retry
	// budget is spent (impulse_retries_budget_exhausted).
	NoBudget
	// NoBackend: the policy would try again but no other backend can
	// take the request (none left untried, or every one full).
	NoBackend
)

// Decision is the answer to a failed try or a hedge timer.
type Decision struct {
	Verdict Verdict
	// Wait is the back-off before the next try (Again; 0 for a hedge and
	// for a retry the budget does not pay for).
	Wait time.Duration
	// Condition is the retry condition the failure matched: the reason
	// label of impulse_retries.
	Condition Condition
	// Slot is the budget slot the next try holds (Again; 0 for a retry
	// the budget does not pay for, see State.Retry).
	Slot Slot
}

// Result is one try's outcome as the attempt loop saw it, all the
// decision needs.
type Result struct {
	// Status is the backend's final status; 0 when the try failed
	// without an answer.
	Status int
	// Failure is the condition of a try without an answer: ConnectFailure,
	// RefusedStream or Reset (a response-header or per-try timeout
	// included); 0 for a failure no condition covers (the client's
	// doing, an invalid response, a request no backend would take).
	Failure Condition
	// Method is the request's method.
	Method string
	// Started: a response byte reached the client (a 1xx other than 100).
	Started bool
	// BodyKept: the request body, if any, can be sent again.
	BodyKept bool
	// Expired: the client left or the request's deadline passed
	// (request timeout, grpc-timeout): no try may follow.
	Expired bool
	// Ejected: the backend answered 5xx and outlier detection is taking
	// it out (Failure.Ejected).
	Ejected bool
	// Behind: the try broke or timed out (Reset) at a backend that was
	// behind (it held outlier detection's consecutive_failures requests
	// unanswered while its siblings answered; upstream.Backend.Stalled):
	// a black hole's stuck request. Its retry is free as an Ejected one.
	Behind bool
}

// Condition is the retry condition r matches: its status's
// (StatusCondition) when the backend answered, else its Failure.
func (r Result) Condition() Condition {
	if r.Status != 0 {
		return StatusCondition(r.Status)
	}
	return r.Failure
}

// State is one request's attempt state: the tries sent, the hedged copies
// and the budget slots it holds. The attempt loops act on its decisions
// and never count anything themselves; Close gives back whatever is still
// held, so a missed Release cannot leak the budget past the request.
type State struct {
	s      *Settings
	load   Load
	tries  int    // tries sent, the first included, hedges not
	hedges int    // hedged copies sent
	held   uint16 // bit i: slot i+1 is held
	next   Slot   // the last slot number handed out
	// rnd draws the back-off's jitter (nil: math/rand/v2); for tests.
	rnd func() uint64
}

// Tries is the number of tries sent, the first included, hedges not.
func (st *State) Tries() int { return st.tries }

// Hedges is the number of hedged copies sent.
func (st *State) Hedges() int { return st.hedges }

// Policy is the request's retry policy.
func (st *State) Policy() *Policy { return &st.s.policy }

// Find looks for a backend the request has not been sent to: found is
// false when there is none; failing tells that its last request failed.
type Find func() (found, failing bool)

// Retry decides what follows the failed try res. When the policy allows
// another try, find is called to look for a backend not tried yet, the
// budget is asked, and claim takes that backend's slot
// (max_requests_per_backend; false: full). Only an Again decision holds a
// budget slot, for the next try.
//
// A try the backend provably never saw (ConnectFailure, RefusedStream),
// a 5xx from a backend outlier detection is taking out (Ejected), or a
// Reset at a backend that was behind (Behind: a black hole), that
// goes to a backend whose last request did not fail is sent at once and
// takes no slot: it is the request that would have gone to the dead
// backend, not extra load on any that saw it, which is what the budget
// bounds (Envoy's budget and back-off apply to every retry; here a dead
// backend among healthy ones costs clients nothing). When every backend is
// failing, such retries wait and pay as any other (case R04).
func (st *State) Retry(res Result, find Find, claim func() bool) Decision {
	cond := res.Condition()
	if res.Ejected {
		cond = Outlier
	}
	p := &st.s.policy
	if res.Expired || !p.Retry(Failure{Condition: cond, Method: res.Method, Tries: st.tries, Started: res.Started, BodyKept: res.BodyKept, Ejected: res.Ejected}) {
		return Decision{Verdict: Stop, Condition: cond}
	}
	// Free: what the dead (ejected, or silent) backend would have served,
	// sent to one that is not failing, is no extra load.
	free := cond == ConnectFailure || cond == RefusedStream || res.Ejected || res.Behind
	d := st.admit(cond, find, claim, free)
	if d.Verdict == Again {
		if d.Slot != 0 {
			d.Wait = p.Wait(st.tries, st.random())
		}
		st.tries++
	}
	return d
}

// Hedge decides whether a hedged copy goes out now that the hedge delay
// passed without an answer: hedging allows another copy, find finds a
// backend not tried yet, the budget has room and claim takes the
// backend's slot. An Again decision holds a slot for the copy.
func (st *State) Hedge(find Find, claim func() bool) Decision {
	if !st.s.hedge.Next(st.hedges) {
		return Decision{Verdict: Stop}
	}
	d := st.admit(0, find, claim, false)
	if d.Verdict == Again {
		st.hedges++
	}
	return d
}

// admit finds a backend, takes a budget slot (none when free and the
// backend is not failing), then the backend's slot.
func (st *State) admit(cond Condition, find Find, claim func() bool, free bool) Decision {
	found, failing := find()
	if !found {
		return Decision{Verdict: NoBackend, Condition: cond}
	}
	var slot Slot
	if !free || failing {
		var ok bool
		if slot, ok = st.take(); !ok {
			return Decision{Verdict: NoBudget, Condition: cond}
		}
	}
	if !claim() {
		st.Release(slot)
		return Decision{Verdict: NoBackend, Condition: cond}
	}
	return Decision{Verdict: Again, Condition: cond, Slot: slot}
}

// take counts one more retry in flight if the budget allows it: at most
// max(min_retry_concurrency, budget_percent % of the requests in flight
// to the upstream, retries included).
func (st *State) take() (Slot, bool) {
	var active int64
	if st.load != nil {
		active = st.load.InFlight()
	}
	if st.next >= maxSlots || !st.s.policy.Budget.Allows(st.s.retries.Load(), active) {
		return 0, false
	}
	st.s.retries.Add(1)
	st.next++
	st.held |= 1 << (st.next - 1)
	return st.next, true
}

// maxSlots bounds the slots of one request: every retry and hedged copy
// it can send (MaxAttempts-1 + MaxHedges) fits.
const maxSlots = 15

// Release gives slot back to the budget, once: a slot already given back,
// or 0, does nothing.
func (st *State) Release(slot Slot) {
	if slot == 0 {
		return
	}
	bit := uint16(1) << (slot - 1)
	if st.held&bit == 0 {
		return
	}
	st.held &^= bit
	st.s.retries.Add(-1)
}

// Close gives back every slot still held; the request's attempts are
// over. The attempt loops defer it.
func (st *State) Close() {
	for st.held != 0 {
		bit := st.held & -st.held
		st.held &^= bit
		st.s.retries.Add(-1)
	}
}

func (st *State) random() uint64 {
	if st.rnd != nil {
		return st.rnd()
	}
	return rand.Uint64()
}

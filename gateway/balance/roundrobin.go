package balance

import (
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
)

// roundRobin is smooth weighted round-robin as in nginx
// (ngx_http_upstream_get_peer): on every pick each eligible candidate's
// current weight grows by its weight, the largest wins and loses the total.
// With weights 5, 1, 1 the sequence is a a b a c a a: heavy candidates are
// interleaved, never sent in bursts. Equal weights give a strict rotation.
//
// Running the algorithm costs O(n) under a mutex per pick. Because its
// output is periodic (one cycle = sum of weights / their gcd picks), the
// picker precomputes the cycle and serves it lock-free from one atomic
// counter as long as every candidate it hands out still has the weight the
// cycle was computed for. An ineligible candidate's slot is skipped by taking
// the next counter value, so every eligible candidate still gets exactly its
// weight's share of each cycle.
//
// When a weight differs (slow start) the picker runs the live algorithm. It
// returns to the precomputed cycle as soon as the eligible candidates'
// weights equal the cycle's again (slow start after a recovery ends at the
// old weights), or, after rrStableAfter live picks without any weight change,
// precomputes a new cycle for the new weights (slow start of a member that
// joined with the set); that one pick allocates. Cycles longer than
// rrMaxCycle, or costing more than rrMaxBuild to compute, are never
// precomputed.
type roundRobin struct{}

const (
	// rrMaxCycle bounds the length of a precomputed cycle (entries).
	rrMaxCycle = 1 << 14
	// rrMaxBuild bounds the work of precomputing it (cycle × candidates,
	// about a millisecond).
	rrMaxBuild = 1 << 20
	// rrStableAfter is the number of live picks without a weight change
	// after which the cycle is precomputed again.
	rrStableAfter = 4096
)

// Picker implements Policy.
func (roundRobin) Picker(c []Candidate) Picker {
	if p, ok := trivialPicker(c); ok {
		return p
	}
	p := &rrPicker{c: c, current: make([]int64, len(c)), seen: make([]int64, len(c))}
	for i, x := range c {
		p.seen[i] = weightOf(x)
	}
	p.last = newRRSchedule(p.seen)
	if p.last != nil {
		// A random start keeps gateway instances (and successive sets)
		// from all sending their first requests to the same backend.
		p.next.Store(rand.Uint64N(uint64(len(p.last.seq))))
		p.sched.Store(p.last)
	}
	return p
}

type rrPicker struct {
	c []Candidate
	// sched is the precomputed cycle valid for the current weights, nil
	// while the live algorithm runs; next is the position in it.
	sched atomic.Pointer[rrSchedule]
	next  atomic.Uint64
	skips atomic.Uint64 // picks that skipped some candidates (peek)

	mu      sync.Mutex // guards the live algorithm's state below
	current []int64    // current weights of the live algorithm
	last    *rrSchedule
	seen    []int64 // the weights met by the last live picks
	stable  int     // live picks since a weight last changed
}

// rrSchedule is one cycle of smooth weighted round-robin over all
// candidates for the weights w. Immutable.
type rrSchedule struct {
	seq []uint16 // candidate indices
	w   []int64  // the weights the cycle was computed for
}

// newRRSchedule precomputes the cycle for weights (copied), or returns nil
// when it would be longer than rrMaxCycle or cost more than rrMaxBuild.
func newRRSchedule(weights []int64) *rrSchedule {
	var g int64
	for _, w := range weights {
		g = gcd(g, w)
	}
	var length int64
	for _, w := range weights {
		length += w / g
	}
	if length > rrMaxCycle || length*int64(len(weights)) > rrMaxBuild {
		return nil
	}
	s := &rrSchedule{seq: make([]uint16, length), w: slices.Clone(weights)}
	current := make([]int64, len(weights))
	for k := range s.seq {
		best := 0
		for i, w := range s.w {
			current[i] += w / g
			if current[i] > current[best] {
				best = i
			}
		}
		current[best] -= length
		s.seq[k] = uint16(best)
	}
	return s
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Pick implements Picker. A pick that skips (a retry's or a hedge's) is
// taken without moving the rotation: it would otherwise shift every later
// request by one, and with two backends send each first try to the one a
// retry skipped (the one failing).
func (p *rrPicker) Pick(_ *http.Request, skip Skip) int {
	if skip.n > 0 {
		return p.peek(&skip)
	}
	if s := p.sched.Load(); s != nil {
		m := uint64(len(s.seq))
		for range len(p.c) {
			i := int(s.seq[p.next.Add(1)%m])
			c := p.c[i]
			if !usable(p.c, i, &skip) {
				continue
			}
			if weightOf(c) != s.w[i] {
				p.sched.CompareAndSwap(s, nil)
				break
			}
			return i
		}
	}
	return p.smooth(&skip)
}

// peek is a candidate among those skip leaves, chosen without taking a
// step of the rotation new requests follow: the schedule's (or, without
// one, the candidates') usable entries in turn from the rotation's
// position, offset by a count of its own so that retries spread too; -1
// when none is usable.
func (p *rrPicker) peek(skip *Skip) int {
	off := p.skips.Add(1)
	if s := p.sched.Load(); s != nil {
		m := uint64(len(s.seq))
		base := p.next.Load() + off
		for k := uint64(0); k < m; k++ {
			if i := int(s.seq[(base+k)%m]); usable(p.c, i, skip) {
				return i
			}
		}
		return -1
	}
	n := uint64(len(p.c))
	for k := uint64(0); k < n; k++ {
		if i := int((off + k) % n); usable(p.c, i, skip) {
			return i
		}
	}
	return -1
}

// smooth is one step of nginx's smooth weighted round-robin over the
// eligible candidates. Ineligible candidates lose their accumulated current
// weight, so a recovering backend does not get a burst; skipped ones sit
// this step out and keep theirs.
func (p *rrPicker) smooth(skip *Skip) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	var total int64
	matches, changed := p.last != nil, false
	for i, c := range p.c {
		if !c.Eligible() {
			p.current[i] = 0
			continue
		}
		if skip.n > 0 && skip.Has(i) {
			continue
		}
		w := weightOf(c)
		if matches && w != p.last.w[i] {
			matches = false
		}
		if w != p.seen[i] {
			p.seen[i], changed = w, true
		}
		p.current[i] += w
		total += w
		if best < 0 || p.current[i] > p.current[best] {
			best = i
		}
	}
	if best < 0 {
		return -1
	}
	p.current[best] -= total

	if changed {
		p.stable = 0
	} else {
		p.stable++
	}
	if !matches && p.stable == rrStableAfter {
		if s := newRRSchedule(p.seen); s != nil {
			p.last, matches = s, true
		}
	}
	if matches && p.sched.Load() == nil {
		p.sched.Store(p.last)
	}
	return best
}

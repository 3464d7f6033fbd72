package balance

import (
	"math/rand/v2"
	"net/http"
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
// picker precomputes the cycle for the weights seen when it is built and
// serves it lock-free from one atomic counter as long as every candidate it
// hands out still has its snapshot weight. An ineligible candidate's slot is
// skipped by taking the next counter value, so every eligible candidate
// still gets exactly its weight's share of each cycle. When a weight differs
// (slow start, say) the picker runs the live algorithm, and returns to the
// precomputed cycle once the eligible candidates' weights equal the snapshot
// again. Cycles longer than rrMaxCycle (or too costly to build) are not
// precomputed.
type roundRobin struct{}

const (
	// rrMaxCycle bounds the length of a precomputed cycle (entries).
	rrMaxCycle = 1 << 14
	// rrMaxBuild bounds the work of precomputing it (cycle × candidates).
	rrMaxBuild = 1 << 22
)

// Picker implements Policy.
func (roundRobin) Picker(c []Candidate) Picker {
	if p, ok := trivialPicker(c); ok {
		return p
	}
	p := &rrPicker{c: c, current: make([]int64, len(c)), sched: newRRSchedule(c)}
	if p.sched != nil {
		// A random start keeps gateway instances (and successive sets)
		// from all sending their first requests to the same backend.
		p.next.Store(rand.Uint64N(uint64(len(p.sched.seq))))
		p.useSched.Store(true)
	}
	return p
}

type rrPicker struct {
	c []Candidate
	// sched is the precomputed cycle (nil: none); useSched tells whether it
	// is valid for the current weights; next is the cycle position.
	sched    *rrSchedule
	useSched atomic.Bool
	next     atomic.Uint64

	mu      sync.Mutex
	current []int64 // live smooth round-robin current weights, guarded by mu
}

// rrSchedule is one cycle of smooth weighted round-robin over all
// candidates for the weights w. Immutable.
type rrSchedule struct {
	seq []uint16 // candidate indices
	w   []int64  // the weights the cycle was computed for
}

// newRRSchedule precomputes the cycle for c's current weights, or returns
// nil when it would be longer than rrMaxCycle or cost more than rrMaxBuild.
func newRRSchedule(c []Candidate) *rrSchedule {
	s := &rrSchedule{w: make([]int64, len(c))}
	var g int64
	for i, x := range c {
		s.w[i] = weightOf(x)
		g = gcd(g, s.w[i])
	}
	var length int64
	for _, w := range s.w {
		length += w / g
	}
	if length > rrMaxCycle || length*int64(len(c)) > rrMaxBuild {
		return nil
	}
	s.seq = make([]uint16, length)
	current := make([]int64, len(c))
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

// Pick implements Picker.
func (p *rrPicker) Pick(*http.Request) int {
	if p.useSched.Load() {
		s := p.sched
		m := uint64(len(s.seq))
		for range len(p.c) {
			i := int(s.seq[p.next.Add(1)%m])
			c := p.c[i]
			if !c.Eligible() {
				continue
			}
			if weightOf(c) != s.w[i] {
				p.useSched.Store(false)
				break
			}
			return i
		}
	}
	return p.smooth()
}

// smooth is one step of nginx's smooth weighted round-robin over the
// eligible candidates. Ineligible candidates lose their accumulated current
// weight, so a recovering backend does not get a burst.
func (p *rrPicker) smooth() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	best := -1
	var total int64
	snapshot := p.sched != nil
	for i, c := range p.c {
		if !c.Eligible() {
			p.current[i] = 0
			continue
		}
		w := weightOf(c)
		if snapshot && w != p.sched.w[i] {
			snapshot = false
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
	if snapshot && !p.useSched.Load() {
		p.useSched.Store(true)
	}
	return best
}

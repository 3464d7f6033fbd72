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
// interleaved, never sent in bursts.
//
// While all candidates have the same weight the result is a strict rotation,
// which the picker serves lock-free from one atomic counter; it falls back to
// the mutex-guarded smooth algorithm as soon as it meets a different weight,
// and returns to the rotation once the weights are equal again.
type roundRobin struct{}

// Picker implements Policy.
func (roundRobin) Picker(c []Candidate) Picker {
	if p, ok := trivialPicker(c); ok {
		return p
	}
	p := &rrPicker{c: c, current: make([]int64, len(c))}
	// A random start keeps gateway instances (and successive sets) from all
	// sending their first requests to the same backend.
	p.next.Store(rand.Uint64N(uint64(len(c))))
	w := weightOf(c[0])
	for _, x := range c[1:] {
		if weightOf(x) != w {
			return p
		}
	}
	p.uniform.Store(w)
	return p
}

type rrPicker struct {
	c []Candidate
	// uniform > 0: every candidate had this weight when last checked and
	// picks rotate on next; 0: smooth weighted round-robin under mu.
	uniform atomic.Int64
	next    atomic.Uint64

	mu      sync.Mutex
	current []int64 // smooth round-robin current weights, guarded by mu
}

// Pick implements Picker.
func (p *rrPicker) Pick(*http.Request) int {
	n := uint64(len(p.c))
	if w := p.uniform.Load(); w > 0 {
		// Each counter value is one slot of the rotation; an ineligible
		// candidate's slot is skipped by taking another value, so every
		// eligible candidate still gets exactly one pick per cycle.
		for range n {
			i := int(p.next.Add(1) % n)
			c := p.c[i]
			if !c.Eligible() {
				continue
			}
			if weightOf(c) != w {
				p.uniform.CompareAndSwap(w, 0)
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
	best, first := -1, int64(0)
	var total int64
	uniform := true
	for i, c := range p.c {
		if !c.Eligible() {
			p.current[i] = 0
			continue
		}
		w := weightOf(c)
		if best < 0 {
			first = w
		} else if w != first {
			uniform = false
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
	if uniform && p.uniform.Load() != first {
		p.uniform.Store(first)
	}
	return best
}

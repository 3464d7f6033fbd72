package balance

import "net/http"

// leastRequest is the power of two choices (Mitzenmacher, "The Power of Two
// Choices in Randomized Load Balancing", 2001): draw two eligible candidates
// and send to the one with fewer requests in flight per unit of weight
// (InFlight/Weight, compared by cross-multiplying, no floats). Ties, e.g.
// when nothing is in flight, are broken by a coin so no backend is starved
// while counts are equal (case L03).
//
// The two choices are drawn weight-proportionally and with replacement.
// Idle, the comparison always ties, so each pick is exactly a weighted random
// pick; under load it drives InFlight/Weight towards equality, i.e. load in
// proportion to weight (case L01). Drawing two distinct candidates instead
// would make two backends of any weights split idle traffic 50/50.
type leastRequest struct{}

// Picker implements Policy.
func (leastRequest) Picker(c []Candidate) Picker {
	if p, ok := trivialPicker(c); ok {
		return p
	}
	p := &lrPicker{}
	p.s.init(c)
	return p
}

type lrPicker struct{ s sampler }

// Pick implements Picker.
func (p *lrPicker) Pick(_ *http.Request, skip Skip) int {
	i := p.s.sample(&skip)
	if i < 0 {
		return -1
	}
	j := p.s.sample(&skip)
	if j < 0 || j == i {
		return i
	}
	a, b := p.s.c[i], p.s.c[j]
	la := a.InFlight() * weightOf(b)
	lb := b.InFlight() * weightOf(a)
	switch {
	case la < lb:
		return i
	case lb < la:
		return j
	case coin():
		return i
	default:
		return j
	}
}

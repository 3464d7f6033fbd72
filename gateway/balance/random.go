package balance

import (
	"math/rand/v2"
	"net/http"
	"sync/atomic"
)

// random is the weighted random policy: every pick is independent and lands
// on an eligible candidate with probability Weight / (sum of eligible
// weights).
type random struct{}

// Picker implements Policy.
func (random) Picker(c []Candidate) Picker {
	if p, ok := trivialPicker(c); ok {
		return p
	}
	p := &randomPicker{}
	p.s.init(c)
	return p
}

type randomPicker struct{ s sampler }

// Pick implements Picker.
func (p *randomPicker) Pick(_ *http.Request, skip Skip) int { return p.s.sample(&skip) }

// fastTries bounds the rejection-sampling attempts of sampler.sample before
// it falls back to an exact scan.
const fastTries = 8

// sampler draws an eligible candidate index with probability proportional to
// its current weight. It is shared by random, least_request, ewma and the
// key-less fallback of consistent_hash.
//
// The fast path is rejection sampling: draw an index uniformly, reject it if
// ineligible, accept it with probability Weight/maxW. Conditioned on
// acceptance the draw is exactly weight-proportional, and so is the exact
// two-pass scan used after fastTries rejections, so the mixture is exact too
// whenever every eligible weight is ≤ maxW. maxW is a hint refreshed by every
// scan; meeting a larger weight forces a scan, so a stale hint costs at most
// one biased pick. Cost: O(1) expected when most candidates are eligible,
// O(n) when few are.
type sampler struct {
	c    []Candidate
	maxW atomic.Int64 // largest weight seen by the last scan (≥ 1)
}

// init prepares s for the set c.
func (s *sampler) init(c []Candidate) {
	s.c = c
	m := int64(1)
	for _, x := range c {
		m = max(m, weightOf(x))
	}
	s.maxW.Store(m)
}

// sample returns a weighted random eligible index that skip does not hold,
// or -1 if there is none.
func (s *sampler) sample(skip *Skip) int {
	n := uint64(len(s.c))
	m := s.maxW.Load()
	if m <= 1<<31 {
		for range fastTries {
			// One random word per try: the high half picks the index, the
			// low half the acceptance threshold (multiply-shift reduction,
			// bias below 2⁻³¹).
			x := rand.Uint64()
			i := int((x >> 32) * n >> 32)
			c := s.c[i]
			if !usable(s.c, i, skip) {
				continue
			}
			w := weightOf(c)
			if w == m || (w < m && int64((x&(1<<32-1))*uint64(m)>>32) < w) {
				return i
			}
			if w > m {
				break
			}
		}
	}
	return s.scan(skip)
}

// scan is the exact O(n) fallback of sample. Eligibility and weights may
// change between its two passes; it then returns the last eligible index it
// saw (or -1).
func (s *sampler) scan(skip *Skip) int {
	var total, m int64
	for i, c := range s.c {
		if usable(s.c, i, skip) {
			w := weightOf(c)
			total += w
			m = max(m, w)
		}
	}
	if total == 0 {
		return -1
	}
	if s.maxW.Load() != m && skip.n == 0 { // a skipped heavy candidate still counts
		s.maxW.Store(m)
	}
	r := rand.Int64N(total)
	last := -1
	for i, c := range s.c {
		if !usable(s.c, i, skip) {
			continue
		}
		last = i
		if r -= weightOf(c); r < 0 {
			return i
		}
	}
	return last
}

// coin returns true with probability 1/2; it breaks ties between two
// choices.
func coin() bool { return rand.Uint64()&1 == 0 }

package balance

import (
	"net/http"
	"sort"
)

// consistentHash maps a request key to a backend through a Maglev lookup
// table (Eisenbud et al., "Maglev: A Fast and Reliable Software Network Load
// Balancer", NSDI 2016, section 3.4): every candidate owns a share of
// maglevSize slots proportional to its weight, and removing a candidate
// moves (almost) only the keys it owned. The table depends only on the
// candidates' keys and weights, never on their order or on the process, so
// every gateway instance maps a key the same way.
//
// Weights are read once, when the Picker is built: a Maglev table is a
// snapshot, so a weight that changes between picks (slow start) has no
// effect until the next membership change.
//
// A request without the key gets a weighted random eligible candidate. When
// the key's candidate is ineligible the picker walks on through the following
// table slots (at most maglevWalk) to the first eligible candidate, which
// spreads the keys of an unhealthy backend over the others by weight and
// moves no other key; when the walk finds none it scans the set from a
// position derived from the key.
type consistentHash struct{ on hashOn }

func newConsistentHash(o Options) (Policy, error) {
	on, err := parseHashOn(o.HashOn)
	if err != nil {
		return nil, err
	}
	return consistentHash{on: on}, nil
}

const (
	// maglevSize is the lookup table size M: a prime, so every skip value
	// in [1, M) yields a full permutation. Fixed, so that sets of different
	// sizes share it and removing a candidate cannot remap every key. The
	// paper suggests M ≫ 100·N; 65537 keeps imbalance small up to a few
	// hundred candidates.
	maglevSize = 65537
	// maglevWalk bounds the table walk past an ineligible candidate.
	maglevWalk = 128
)

// Picker implements Policy: it builds the lookup table, O(M·N·maxW/ΣW)
// steps and a 128 KiB table for up to 65,536 candidates.
func (p consistentHash) Picker(c []Candidate) Picker {
	if t, ok := trivialPicker(c); ok {
		return t
	}
	if len(c) <= 1<<16 {
		return newMaglevPicker[uint16](c, p.on)
	}
	return newMaglevPicker[uint32](c, p.on)
}

// maglevPicker serves one candidate set; T is wide enough for its indices.
type maglevPicker[T uint16 | uint32] struct {
	on    hashOn
	table []T     // slot → candidate index, read-only after construction
	s     sampler // fallback for requests without a key
}

func newMaglevPicker[T uint16 | uint32](c []Candidate, on hashOn) *maglevPicker[T] {
	p := &maglevPicker[T]{on: on, table: make([]T, maglevSize)}
	p.s.init(c)
	n := len(c)

	// Fill in the order of the keys, so that the table does not depend on
	// the order of c.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return c[order[a]].Key() < c[order[b]].Key() })

	// Each candidate's permutation of the slots is offset, offset+skip,
	// offset+2·skip, … (mod M); next holds its next slot to try.
	next := make([]uint64, n)
	skip := make([]uint64, n)
	weight := make([]int64, n)
	credit := make([]int64, n)
	var maxW int64 = 1
	for k, i := range order {
		h1 := fnvString(fnvOffset64, c[i].Key())
		h2 := mix64(h1 ^ 0x9e3779b97f4a7c15)
		next[k] = h1 % maglevSize
		skip[k] = h2%(maglevSize-1) + 1
		weight[k] = weightOf(c[i])
		maxW = max(maxW, weight[k])
	}

	// Weighted population (as in Envoy): in every round each candidate earns
	// its weight in credit and takes a turn — claims the next free slot of
	// its permutation — per maxW of credit, so the heaviest takes one turn
	// per round and the others a proportional fraction.
	filled := make([]bool, maglevSize)
	for left := maglevSize; left > 0; {
		for k, i := range order {
			if credit[k] += weight[k]; credit[k] < maxW {
				continue
			}
			credit[k] -= maxW
			s := next[k]
			for filled[s] {
				if s += skip[k]; s >= maglevSize {
					s -= maglevSize
				}
			}
			filled[s] = true
			p.table[s] = T(i)
			if s += skip[k]; s >= maglevSize {
				s -= maglevSize
			}
			next[k] = s
			if left--; left == 0 {
				break
			}
		}
	}
	return p
}

// Pick implements Picker.
func (p *maglevPicker[T]) Pick(r *http.Request, skip Skip) int {
	h, ok := p.on.hash(r)
	if !ok {
		return p.s.sample(&skip)
	}
	c := p.s.c
	slot := h % maglevSize
	last := -1
	for range maglevWalk {
		if i := int(p.table[slot]); i != last {
			if usable(c, i, &skip) {
				return i
			}
			last = i
		}
		if slot++; slot == maglevSize {
			slot = 0
		}
	}
	n := uint64(len(c))
	start := h % n
	for k := range n {
		i := int((start + k) % n)
		if usable(c, i, &skip) {
			return i
		}
	}
	return -1
}

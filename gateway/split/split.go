// Package split chooses one of a route's weighted splits (README "Traffic
// splits"): a pure decision over weights, with no network and no
// knowledge of upstreams, table-tested like the balance policies.
//
// The method: every request gets a 64-bit point x, mapped onto the
// cumulative weights (split i owns the share weight[i]/total of the 2^64
// points). Without a sticky key x is the n-th point of a Weyl sequence
// (n times the 64-bit golden ratio, n a per-route atomic counter): its
// points are spread so evenly that after N requests each split's count is
// within a few requests of N·weight/total (error O(log N), deterministic,
// lock-free). With a sticky key x is the key's 64-bit hash
// (balance.HashKey): the same key always lands on the same split, and the
// keys spread by weight.
//
// A split that cannot serve (the caller's ok(i) is false: its upstream has
// no eligible backend) is skipped: x is mapped onto the weights of the
// splits that can, so its share goes to the others in proportion (as
// Traefik's weighted round robin skips a service with no healthy server).
// When none can, the first choice stands (and gets the usual 503).
package split

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
)

// golden is 2^64 / φ, the Weyl sequence's step: consecutive points are far
// apart and every prefix of the sequence is nearly uniform.
const golden = 0x9E3779B97F4A7C15

// Errors of New.
var (
	ErrNoSplits   = errors.New("split: no splits")
	ErrWeight     = errors.New("split: weight must be ≥ 0")
	ErrZeroWeight = errors.New("split: weights sum to 0")
)

// Chooser picks among splits by weight. Safe for concurrent use; the
// weights never change (a new configuration builds a new Chooser).
type Chooser struct {
	// cum[i] is the sum of the weights of splits 0..i.
	cum   []uint64
	total uint64
	next  atomic.Uint64 // Weyl counter
}

// New returns a Chooser over weights (one per split, in order). Errors:
// no weights, a negative one, all zero (ErrNoSplits, ErrWeight,
// ErrZeroWeight). A split of weight 0 is never chosen.
func New(weights []int) (*Chooser, error) {
	if len(weights) == 0 {
		return nil, ErrNoSplits
	}
	c := &Chooser{cum: make([]uint64, len(weights))}
	for i, w := range weights {
		if w < 0 {
			return nil, fmt.Errorf("%w (split %d: %d)", ErrWeight, i, w)
		}
		c.total += uint64(w)
		c.cum[i] = c.total
	}
	if c.total == 0 {
		return nil, ErrZeroWeight
	}
	return c, nil
}

// Len is the number of splits.
func (c *Chooser) Len() int { return len(c.cum) }

// Next is the next point of the Weyl sequence (one per request of a route
// without a sticky key).
func (c *Chooser) Next() uint64 { return c.next.Add(1) * golden }

// Choose maps the point x onto the splits by weight and returns a split's
// index, skipping those for which ok is false (nil ok: all can serve).
// It does not allocate.
func (c *Chooser) Choose(x uint64, ok func(i int) bool) int {
	i := pick(c.cum, c.total, x)
	if ok == nil || ok(i) {
		return i
	}
	// Map x onto the weights of the splits that can serve.
	var total uint64
	for j := range c.cum {
		if ok(j) {
			total += c.weight(j)
		}
	}
	if total == 0 {
		return i
	}
	at := scale(x, total)
	var sum uint64
	for j := range c.cum {
		if !ok(j) {
			continue
		}
		if sum += c.weight(j); at < sum {
			return j
		}
	}
	return i // unreachable: at < total
}

func (c *Chooser) weight(j int) uint64 {
	if j == 0 {
		return c.cum[0]
	}
	return c.cum[j] - c.cum[j-1]
}

// scale maps x in [0, 2^64) onto [0, total): the high word of x·total.
func scale(x, total uint64) uint64 {
	hi, _ := bits.Mul64(x, total)
	return hi
}

// pick is the index i with cum[i-1] ≤ scale(x) < cum[i]: a scan for a few
// splits, a binary search for many.
func pick(cum []uint64, total, x uint64) int {
	at := scale(x, total)
	if len(cum) <= 8 {
		for i, s := range cum {
			if at < s {
				return i
			}
		}
		return len(cum) - 1
	}
	lo, hi := 0, len(cum)-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if at < cum[m] {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

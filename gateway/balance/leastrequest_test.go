package balance

import (
	"fmt"
	"math"
	"testing"
)

func lrCounts(t *testing.T, inflight []int64, weights []int, picks int) []int {
	t.Helper()
	fs, cs := fakes(weights...)
	for i, n := range inflight {
		fs[i].n.Store(n)
	}
	pk := mustNew(t, policyCase{name: LeastRequest}).Picker(cs)
	counts := make([]int, len(cs))
	for range picks {
		counts[pk.Pick(nil, Skip{})]++
	}
	return counts
}

func TestLeastRequestPrefersFewerInFlight(t *testing.T) {
	// a is busy: it wins only when both choices are a (1/9).
	counts := lrCounts(t, []int64{10, 0, 0}, []int{1, 1, 1}, 3000)
	if counts[0] > 3000/6 {
		t.Errorf("busy a got %d of 3000 picks, want ≈ 1/9", counts[0])
	}
	// Per unit of weight: a has 10 in flight at weight 10, b 2 at weight 1,
	// so a is the less loaded one.
	counts = lrCounts(t, []int64{10, 2}, []int{10, 1}, 3000)
	if counts[1] > 3000/6 {
		t.Errorf("b (2 in flight at weight 1) got %d of 3000 picks vs a (10 at weight 10)", counts[1])
	}
}

// TestL03NoStarvationWhenCountsTie: with equal in-flight counts (zero or
// not), least_request spreads evenly; no backend is starved.
func TestL03NoStarvationWhenCountsTie(t *testing.T) {
	for _, n := range []int64{0, 5} {
		t.Run(fmt.Sprintf("inflight=%d", n), func(t *testing.T) {
			const picks = 3000
			counts := lrCounts(t, []int64{n, n, n}, []int{1, 1, 1}, picks)
			for i, c := range counts {
				if math.Abs(float64(c)/picks-1.0/3) > 0.05 {
					t.Errorf("backend %d got %d of %d picks, want ≈ 1/3: %v", i, c, picks, counts)
				}
			}
		})
	}
}

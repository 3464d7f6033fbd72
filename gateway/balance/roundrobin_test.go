package balance

import (
	"slices"
	"strings"
	"testing"
)

func rrPick(t *testing.T, cs []Candidate) Picker {
	t.Helper()
	return mustNew(t, policyCase{name: RoundRobin}).Picker(cs)
}

// sequence returns n picks as letters a, b, c, … ('-' for -1).
func sequence(pk Picker, n int) string {
	var b strings.Builder
	for range n {
		if k := pk.Pick(nil, Skip{}); k < 0 {
			b.WriteByte('-')
		} else {
			b.WriteByte(byte('a' + k))
		}
	}
	return b.String()
}

func TestRoundRobinEqualWeightsRotate(t *testing.T) {
	for _, w := range []int{1, 100} {
		_, cs := fakes(w, w, w, w)
		pk := rrPick(t, cs)
		prev := pk.Pick(nil, Skip{})
		for i := range 400 {
			k := pk.Pick(nil, Skip{})
			if k != (prev+1)%len(cs) {
				t.Fatalf("weight %d, pick %d: %d after %d, want strict rotation", w, i, k, prev)
			}
			prev = k
		}
	}
}

// TestRoundRobinSmooth checks nginx's example: weights 5, 1, 1 give
// a a b a c a a, repeated, both from the precomputed cycle (which starts at
// a random position) and from the live algorithm.
func TestRoundRobinSmooth(t *testing.T) {
	fs, cs := fakes(5, 1, 1)
	pk := rrPick(t, cs)
	cycle := "aabacaa"
	if got := sequence(pk, 21); !strings.Contains(strings.Repeat(cycle, 4), got) {
		t.Fatalf("precomputed: sequence %q, want a rotation of %q repeated", got, cycle)
	}
	// Doubled weights: not the snapshot, so the live algorithm runs, from
	// its initial state.
	for _, f := range fs {
		f.w.Store(2 * f.w.Load())
	}
	if got, want := sequence(pk, 21), strings.Repeat(cycle, 3); got != want {
		t.Fatalf("live: sequence %q, want %q", got, want)
	}
	if pk.(*rrPicker).sched.Load() != nil {
		t.Error("weights differ from the snapshot, but the precomputed cycle is in use")
	}
}

// TestRoundRobinLongCycle: weights whose cycle is too long to precompute
// are served by the live algorithm, exactly.
func TestRoundRobinLongCycle(t *testing.T) {
	_, cs := fakes(rrMaxCycle, 1, 2)
	pk := rrPick(t, cs)
	if pk.(*rrPicker).sched.Load() != nil {
		t.Fatal("cycle of", rrMaxCycle+3, "precomputed")
	}
	counts := map[byte]int{}
	for _, c := range []byte(sequence(pk, rrMaxCycle+3)) {
		counts[c]++
	}
	if counts['a'] != rrMaxCycle || counts['b'] != 1 || counts['c'] != 2 {
		t.Errorf("one cycle: %v", counts)
	}
}

// TestRoundRobinSkipsIneligibleFairly: with b down, a and c alternate, c
// does not inherit b's turns.
func TestRoundRobinSkipsIneligibleFairly(t *testing.T) {
	for _, weights := range [][]int{{1, 1, 1}, {2, 2, 1}} {
		fs, cs := fakes(weights...)
		pk := rrPick(t, cs)
		fs[1].down.Store(true)
		counts := map[byte]int{}
		for _, c := range []byte(sequence(pk, 3000)) {
			counts[c]++
		}
		want := map[byte]int{'a': 1000 * 3 * weights[0] / (weights[0] + weights[2]), 'c': 1000 * 3 * weights[2] / (weights[0] + weights[2])}
		for c, n := range want {
			if d := counts[c] - n; d < -1 || d > 1 {
				t.Errorf("weights %v, b down: %c got %d picks, want %d", weights, c, counts[c], n)
			}
		}
		if counts['b'] != 0 {
			t.Errorf("weights %v: ineligible b picked %d times", weights, counts['b'])
		}
	}
}

// TestRoundRobinWeightChanges: weights are read on every pick (slow
// start); the picker leaves the precomputed cycle and returns to it.
func TestRoundRobinWeightChanges(t *testing.T) {
	fs, cs := fakes(1, 1, 1)
	pk := rrPick(t, cs).(*rrPicker)
	if s := pk.sched.Load(); s == nil || len(s.seq) != 3 {
		t.Fatal("equal weights: no precomputed rotation")
	}
	fs[0].w.Store(3)
	sequence(pk, 5) // meets the new weight, switches to the live algorithm
	counts := map[byte]int{}
	for _, c := range []byte(sequence(pk, 500)) {
		counts[c]++
	}
	if counts['a'] != 300 || counts['b'] != 100 || counts['c'] != 100 {
		t.Errorf("weights 3,1,1: counts %v, want a 300, b 100, c 100", counts)
	}
	if pk.sched.Load() != nil {
		t.Error("unequal weights: still on the precomputed rotation")
	}
	fs[0].w.Store(1)
	sequence(pk, 1)
	if pk.sched.Load() == nil {
		t.Error("snapshot weights again: precomputed rotation not restored")
	}
}

// TestRoundRobinNewWeightsSettle: a member that joined in slow start ends
// at a weight the picker never saw; once weights stop changing the picker
// precomputes a cycle for them.
func TestRoundRobinNewWeightsSettle(t *testing.T) {
	fs, cs := fakes(1, 1, 1)
	pk := rrPick(t, cs).(*rrPicker)
	for w := int64(2); w <= 4; w++ { // the ramp
		fs[2].w.Store(w)
		sequence(pk, 100)
		if pk.sched.Load() != nil {
			t.Fatalf("weight %d: precomputed cycle in use while weights change", w)
		}
	}
	sequence(pk, rrStableAfter)
	s := pk.sched.Load()
	if s == nil || !slices.Equal(s.w, []int64{1, 1, 4}) {
		t.Fatalf("after %d stable picks: cycle %+v, want one for weights 1, 1, 4", rrStableAfter, s)
	}
	counts := map[byte]int{}
	for _, c := range []byte(sequence(pk, 600)) {
		counts[c]++
	}
	if counts['a'] != 100 || counts['b'] != 100 || counts['c'] != 400 {
		t.Errorf("weights 1,1,4: counts %v", counts)
	}
	if a := testing.AllocsPerRun(100, func() { pk.Pick(nil, Skip{}) }); a != 0 {
		t.Errorf("%v allocs per pick on the new cycle", a)
	}
}

package balance

import (
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
		if k := pk.Pick(nil); k < 0 {
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
		prev := pk.Pick(nil)
		for i := range 400 {
			k := pk.Pick(nil)
			if k != (prev+1)%len(cs) {
				t.Fatalf("weight %d, pick %d: %d after %d, want strict rotation", w, i, k, prev)
			}
			prev = k
		}
	}
}

// TestRoundRobinSmooth checks nginx's example: weights 5, 1, 1 give
// a a b a c a a, repeated.
func TestRoundRobinSmooth(t *testing.T) {
	_, cs := fakes(5, 1, 1)
	if got, want := sequence(rrPick(t, cs), 21), strings.Repeat("aabacaa", 3); got != want {
		t.Fatalf("sequence %q, want %q", got, want)
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

// TestRoundRobinWeightChanges: weights read on every pick (slow start);
// the picker leaves and re-enters the lock-free rotation.
func TestRoundRobinWeightChanges(t *testing.T) {
	fs, cs := fakes(1, 1, 1)
	pk := rrPick(t, cs).(*rrPicker)
	if pk.uniform.Load() != 1 {
		t.Fatal("equal weights: not in rotation mode")
	}
	fs[0].w.Store(3)
	sequence(pk, 5) // meets the new weight, switches to smooth
	counts := map[byte]int{}
	for _, c := range []byte(sequence(pk, 500)) {
		counts[c]++
	}
	if counts['a'] != 300 || counts['b'] != 100 || counts['c'] != 100 {
		t.Errorf("weights 3,1,1: counts %v, want a 300, b 100, c 100", counts)
	}
	if pk.uniform.Load() != 0 {
		t.Error("unequal weights: still in rotation mode")
	}
	fs[0].w.Store(1)
	sequence(pk, 1)
	if pk.uniform.Load() != 1 {
		t.Error("equal weights again: rotation mode not restored")
	}
}

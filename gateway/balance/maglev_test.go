package balance

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
)

func chPick(t testing.TB, cs []Candidate) Picker {
	t.Helper()
	return mustNew(t, policyCase{name: ConsistentHash, opts: Options{HashOn: "header:X-User"}}).Picker(cs)
}

// mapping returns the key of the candidate each request maps to.
func mapping(pk Picker, cs []Candidate, reqs []*http.Request) []string {
	m := make([]string, len(reqs))
	for i, r := range reqs {
		if k := pk.Pick(r, Skip{}); k >= 0 {
			m[i] = cs[k].Key()
		}
	}
	return m
}

// TestL02ConsistentHashMinimalMovement: removing one of four backends keeps
// ≥ 99% of the other backends' keys in place and spreads the removed one's
// keys over the rest; adding it back restores the original mapping.
func TestL02ConsistentHashMinimalMovement(t *testing.T) {
	reqs := keyedRequests(10000)
	_, four := fakes(1, 1, 1, 1)
	before := mapping(chPick(t, four), four, reqs)

	three := []Candidate{four[0], four[1], four[3]} // b2 leaves
	after := mapping(chPick(t, three), three, reqs)
	kept, stayers := 0, 0
	moved := map[string]int{}
	for i := range reqs {
		if before[i] == "b2" {
			moved[after[i]]++
			continue
		}
		stayers++
		if after[i] == before[i] {
			kept++
		}
	}
	t.Logf("kept %d of %d keys of the remaining backends; b2's keys moved to %v", kept, stayers, moved)
	if float64(kept) < 0.99*float64(stayers) {
		t.Errorf("only %d of %d keys of the remaining backends kept their backend, want ≥ 99%%", kept, stayers)
	}
	total := moved["b0"] + moved["b1"] + moved["b3"]
	for _, k := range []string{"b0", "b1", "b3"} {
		if moved[k] < total/6 {
			t.Errorf("b2's %d keys spread unevenly: %v", total, moved)
		}
	}

	again := mapping(chPick(t, four), four, reqs)
	for i := range reqs {
		if again[i] != before[i] {
			t.Fatalf("after b2 came back, key %d maps to %s, before to %s", i, again[i], before[i])
		}
	}
}

// TestConsistentHashDeterministic: two pickers built independently (two
// gateway instances), from candidates in different order, map every key to
// the same backend.
func TestConsistentHashDeterministic(t *testing.T) {
	reqs := keyedRequests(5000)
	_, cs := fakes(1, 2, 3, 1, 1, 5, 1)
	shuffled := append([]Candidate(nil), cs...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	a := mapping(chPick(t, cs), cs, reqs)
	b := mapping(chPick(t, shuffled), shuffled, reqs)
	for i := range reqs {
		if a[i] != b[i] {
			t.Fatalf("key %d: %s on one instance, %s on the other", i, a[i], b[i])
		}
	}
	// A fixed point pins the hash across processes and releases: changing
	// it remaps every user's backend on upgrade.
	_, four := fakes(1, 1, 1, 1)
	got := mapping(chPick(t, four), four, keyedRequests(8))
	want := goldenMapping
	if fmt.Sprint(got) != want {
		t.Errorf("mapping of user-0..7 over b0..b3 = %v, want %v", got, want)
	}
}

// goldenMapping is the mapping of user-0 … user-7 over four equal backends.
const goldenMapping = "[b2 b3 b0 b1 b3 b0 b2 b2]"

// TestConsistentHashTableShares: slots are shared in proportion to weight.
func TestConsistentHashTableShares(t *testing.T) {
	_, cs := fakes(1, 2, 3, 4)
	pk := chPick(t, cs).(*maglevPicker[uint16])
	counts := make([]int, len(cs))
	for _, i := range pk.table {
		counts[i]++
	}
	for i, c := range counts {
		want := maglevSize * (i + 1) / 10
		if d := c - want; d < -2 || d > 2 {
			t.Errorf("candidate %d (weight %d) owns %d slots, want %d: %v", i, i+1, c, want, counts)
		}
	}
}

// TestConsistentHashIneligible: the keys of an ineligible backend spread
// over the others, no other key moves, and they return on recovery.
func TestConsistentHashIneligible(t *testing.T) {
	reqs := keyedRequests(10000)
	fs, cs := fakes(1, 1, 1, 1)
	pk := chPick(t, cs)
	before := mapping(pk, cs, reqs)
	fs[1].down.Store(true)
	during := mapping(pk, cs, reqs)
	moved := map[string]int{}
	for i := range reqs {
		switch {
		case before[i] == "b1":
			moved[during[i]]++
		case during[i] != before[i]:
			t.Fatalf("key %d moved from healthy %s to %s", i, before[i], during[i])
		}
	}
	if moved["b1"] != 0 || moved["b0"] == 0 || moved["b2"] == 0 || moved["b3"] == 0 {
		t.Errorf("b1's keys went to %v, want spread over b0, b2, b3", moved)
	}
	fs[1].down.Store(false)
	after := mapping(pk, cs, reqs)
	for i := range reqs {
		if after[i] != before[i] {
			t.Fatalf("key %d: %s after recovery, %s before", i, after[i], before[i])
		}
	}
	// Only one of many candidates eligible: the walk gives up, the scan finds it.
	weights := make([]int, 200)
	for i := range weights {
		weights[i] = 1
	}
	fs, cs = fakes(weights...)
	for _, f := range fs {
		f.down.Store(true)
	}
	fs[137].down.Store(false)
	pk = chPick(t, cs)
	for _, r := range reqs[:500] {
		if k := pk.Pick(r, Skip{}); k != 137 {
			t.Fatalf("Pick = %d, want the only eligible 137", k)
		}
	}
}

// TestConsistentHashWithoutKey: requests without the key are spread by
// weight over eligible candidates.
func TestConsistentHashWithoutKey(t *testing.T) {
	fs, cs := fakes(3, 1, 1)
	fs[2].down.Store(true)
	pk := chPick(t, cs)
	counts := make([]int, len(cs))
	for _, r := range []*http.Request{nil, {}, {Header: http.Header{"X-User": {""}}}} {
		for range 1000 {
			counts[pk.Pick(r, Skip{})]++
		}
	}
	if counts[2] != 0 || counts[0] < 2000 || counts[0] > 2500 {
		t.Errorf("key-less picks %v, want ≈ 2250 / 750 / 0", counts)
	}
}

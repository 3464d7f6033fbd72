package balance

import (
	"fmt"
	"testing"
)

// TestSkip: every policy passes over the skipped candidates as it does over
// ineligible ones, returns -1 when only skipped ones are left, and still
// spreads over the rest; a consistent_hash key whose backend is skipped
// moves to one other backend, the same on every pick.
func TestSkip(t *testing.T) {
	reqs := keyedRequests(200)
	for _, pc := range allPolicies {
		for _, tc := range []struct {
			name    string
			weights []int
			down    []int
			skip    []int
			want    []int // the indices picks may land on; none: -1
		}{
			{"one of three", []int{1, 1, 1}, nil, []int{0}, []int{1, 2}},
			{"two of four weighted", []int{3, 1, 2, 1}, nil, []int{0, 2}, []int{1, 3}},
			{"skip and down", []int{1, 1, 1}, []int{1}, []int{0}, []int{2}},
			{"all skipped", []int{1, 1}, nil, []int{0, 1}, nil},
			{"single skipped", []int{5}, nil, []int{0}, nil},
			{"nothing skipped", []int{1, 1}, nil, nil, []int{0, 1}},
		} {
			t.Run(fmt.Sprintf("%s/%s", pc.name, tc.name), func(t *testing.T) {
				fs, cs := fakes(tc.weights...)
				for _, i := range tc.down {
					fs[i].down.Store(true)
				}
				var skip Skip
				for _, i := range tc.skip {
					skip.Add(i)
				}
				pk := mustNew(t, pc).Picker(cs)
				seen := map[int]int{}
				for _, r := range reqs {
					seen[pk.Pick(r, skip)]++
				}
				if len(tc.want) == 0 {
					if len(seen) != 1 || seen[-1] == 0 {
						t.Fatalf("picks %v, want only -1", seen)
					}
					return
				}
				for k := range seen {
					if !contains(tc.want, k) {
						t.Fatalf("picks %v, want only %v", seen, tc.want)
					}
				}
				if len(seen) != len(tc.want) {
					t.Errorf("picks %v: some of %v never picked", seen, tc.want)
				}
			})
		}
	}
}

// TestSkipMovesHashedKey: with consistent_hash, skipping the backend a key
// maps to sends the key to one other backend, always the same.
func TestSkipMovesHashedKey(t *testing.T) {
	_, cs := fakes(1, 1, 1, 1)
	pk := mustNew(t, policyCase{ConsistentHash, Options{HashOn: "header:X-User"}}).Picker(cs)
	for _, r := range keyedRequests(50) {
		home := pk.Pick(r, Skip{})
		var skip Skip
		skip.Add(home)
		other := pk.Pick(r, skip)
		if other == home || other < 0 {
			t.Fatalf("key moved from %d to %d", home, other)
		}
		for range 5 {
			if k := pk.Pick(r, skip); k != other {
				t.Fatalf("skipped key went to %d, then %d", other, k)
			}
		}
	}
}

// TestSkipFull: Add refuses past MaxSkip; Has finds what was added.
func TestSkipFull(t *testing.T) {
	var s Skip
	for i := range MaxSkip {
		if !s.Add(i * 3) {
			t.Fatalf("Add %d refused", i)
		}
	}
	if s.Add(1000) || s.Len() != MaxSkip || !s.Has(3) || s.Has(1000) || s.Has(1) {
		t.Fatalf("full set: len %d, Has(3) %v, Has(1000) %v, Has(1) %v", s.Len(), s.Has(3), s.Has(1000), s.Has(1))
	}
}

// TestPickWithSkipDoesNotAllocate: a pick that skips allocates no more
// than one that does not.
func TestPickWithSkipDoesNotAllocate(t *testing.T) {
	r := keyedRequests(1)[0]
	for _, pc := range allPolicies {
		_, cs := fakes(1, 2, 3, 1, 2)
		pk := mustNew(t, pc).Picker(cs)
		var skip Skip
		skip.Add(pk.Pick(r, Skip{}))
		if a := testing.AllocsPerRun(1000, func() { pk.Pick(r, skip) }); a != 0 {
			t.Errorf("%s: %v allocs per Pick with a skip, want 0", pc.name, a)
		}
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestRoundRobinRetriesKeepTheRotation: a retry's pick (skipping the tried
// backend) does not move round_robin's rotation, so first tries keep
// alternating between two backends however many retries happen; with the
// rotation moved, every first try landed on the backend the retries skip.
func TestRoundRobinRetriesKeepTheRotation(t *testing.T) {
	for _, weights := range [][]int{{1, 1}, {5, 5}} {
		_, cs := fakes(weights...)
		pk := mustNew(t, policyCase{RoundRobin, Options{}}).Picker(cs)
		first := map[int]int{}
		for range 100 { // past rrStableAfter: the precomputed schedule too
			i := pk.Pick(nil, Skip{})
			first[i]++
			var skip Skip
			skip.Add(i)
			if j := pk.Pick(nil, skip); j == i || j < 0 {
				t.Fatalf("retry pick %d after %d", j, i)
			}
		}
		if first[0] != 50 || first[1] != 50 {
			t.Fatalf("weights %v: first tries %v, want 50 each", weights, first)
		}
	}
}

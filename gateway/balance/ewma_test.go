package balance

import "testing"

func ewmaPick(t *testing.T, cs []Candidate) Picker {
	t.Helper()
	return mustNew(t, policyCase{name: EWMA}).Picker(cs)
}

func TestEWMASlowCandidateGetsLess(t *testing.T) {
	fs, cs := fakes(1, 1, 1)
	fs[2].setLat(10e6) // 10 ms against 1 ms
	pk := ewmaPick(t, cs)
	counts := make([]int, len(cs))
	for range 3000 {
		counts[pk.Pick(nil, Skip{})]++
	}
	// c wins only when both choices are c (1/9).
	if counts[2] > 3000/6 {
		t.Errorf("slow c got %d of 3000 picks, want ≈ 1/9: %v", counts[2], counts)
	}
	// Under load the queue term counts: a fast backend with a long queue
	// loses against a slower idle one.
	fs[0].n.Store(50)
	fs[1].n.Store(50)
	counts = make([]int, len(cs))
	for range 3000 {
		counts[pk.Pick(nil, Skip{})]++
	}
	if counts[2] < 3000/2 {
		t.Errorf("idle slow c got %d of 3000 picks against two backends with 50 in flight", counts[2])
	}
}

func TestEWMAUnsampledProbedFirst(t *testing.T) {
	fs, cs := fakes(1, 1, 1, 1)
	fs[2].setLat(0) // a new member, no sample yet
	pk := ewmaPick(t, cs)
	if k := pk.Pick(nil, Skip{}); k != 2 {
		t.Fatalf("first pick %d, want the unsampled candidate 2", k)
	}
	// While its probe is in flight it is not flooded.
	fs[2].n.Store(1)
	n := 0
	for range 1000 {
		if pk.Pick(nil, Skip{}) == 2 {
			n++
		}
	}
	if n > 1000/10 {
		t.Errorf("unsampled candidate with a probe in flight got %d of 1000 picks", n)
	}
	// Once sampled it competes normally.
	fs[2].n.Store(0)
	fs[2].setLat(1e6)
	n = 0
	for range 4000 {
		if pk.Pick(nil, Skip{}) == 2 {
			n++
		}
	}
	if n < 700 || n > 1300 {
		t.Errorf("sampled candidate got %d of 4000 picks, want ≈ 1000", n)
	}
}

// TestEWMAProbesNewMembersOneAtATime: a set of new members gets one probe
// each before any gets a second request.
func TestEWMAProbesNewMembersOneAtATime(t *testing.T) {
	fs, cs := fakes(1, 1, 1, 1, 1)
	for _, f := range fs {
		f.setLat(0)
	}
	pk := ewmaPick(t, cs)
	seen := map[int]bool{}
	for range len(fs) {
		k := pk.Pick(nil, Skip{})
		if seen[k] {
			t.Fatalf("candidate %d probed twice before all were probed", k)
		}
		seen[k] = true
		fs[k].n.Add(1)
	}
	// Ineligible unsampled candidates do not keep probing on.
	for _, f := range fs {
		f.n.Store(0)
		f.down.Store(true)
	}
	fs[0].down.Store(false)
	fs[0].setLat(1e6)
	pk.Pick(nil, Skip{})
	if pk.(*ewmaPicker).probing.Load() {
		t.Error("still probing with no eligible unsampled candidate")
	}
}

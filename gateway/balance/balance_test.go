package balance

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// fake is a Candidate whose state tests set directly.
type fake struct {
	key  string
	w    atomic.Int64
	n    atomic.Int64
	down atomic.Bool
	lat  atomic.Uint64 // math.Float64bits of the EWMA in ns
}

func (f *fake) Key() string          { return f.key }
func (f *fake) Weight() int          { return int(f.w.Load()) }
func (f *fake) InFlight() int64      { return f.n.Load() }
func (f *fake) Eligible() bool       { return !f.down.Load() }
func (f *fake) LatencyEWMA() float64 { return math.Float64frombits(f.lat.Load()) }
func (f *fake) setLat(ns float64)    { f.lat.Store(math.Float64bits(ns)) }

// fakes returns one candidate per weight, keyed b0, b1, …, all eligible with
// a latency sample of 1 ms (so ewma does not probe unless a test clears it).
func fakes(weights ...int) ([]*fake, []Candidate) {
	fs := make([]*fake, len(weights))
	cs := make([]Candidate, len(weights))
	for i, w := range weights {
		f := &fake{key: fmt.Sprintf("b%d", i)}
		f.w.Store(int64(w))
		f.setLat(1e6)
		fs[i], cs[i] = f, f
	}
	return fs, cs
}

// policyCase is one policy under test with a request factory: consistent_hash
// hashes on a header, and req(i) gives request i its own key.
type policyCase struct {
	name string
	opts Options
}

var allPolicies = []policyCase{
	{RoundRobin, Options{}},
	{Random, Options{}},
	{LeastRequest, Options{}},
	{ConsistentHash, Options{HashOn: "header:X-User"}},
	{EWMA, Options{}},
}

func mustNew(t testing.TB, pc policyCase) Policy {
	t.Helper()
	p, err := New(pc.name, pc.opts)
	if err != nil {
		t.Fatalf("New(%q, %+v): %v", pc.name, pc.opts, err)
	}
	return p
}

// keyedRequests returns n requests with distinct X-User keys.
func keyedRequests(n int) []*http.Request {
	rs := make([]*http.Request, n)
	for i := range rs {
		rs[i] = &http.Request{Header: http.Header{"X-User": {fmt.Sprintf("user-%d", i)}}}
	}
	return rs
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name, hashOn string
		want         error // nil: success
	}{
		{"", "", nil},
		{RoundRobin, "", nil},
		{Random, "", nil},
		{LeastRequest, "", nil},
		{EWMA, "", nil},
		{ConsistentHash, "header:X-User", nil},
		{ConsistentHash, "header:x-user", nil},
		{ConsistentHash, "cookie:session", nil},
		{ConsistentHash, "query:sid", nil},
		{ConsistentHash, "query:a b", nil},
		{ConsistentHash, "path", nil},
		{ConsistentHash, "authority", nil},
		{ConsistentHash, "client_ip", nil},

		{"fastest", "", ErrUnknownPolicy},
		{"Round_Robin", "", ErrUnknownPolicy},
		{"fastest", "path", ErrUnknownPolicy},
		{ConsistentHash, "", ErrHashOn},
		{ConsistentHash, "header", ErrHashOn},
		{ConsistentHash, "header:", ErrHashOn},
		{ConsistentHash, "header:X User", ErrHashOn},
		{ConsistentHash, "header:host", ErrHashOn},
		{ConsistentHash, "cookie:", ErrHashOn},
		{ConsistentHash, "cookie:a=b", ErrHashOn},
		{ConsistentHash, "query:", ErrHashOn},
		{ConsistentHash, "path:/x", ErrHashOn},
		{ConsistentHash, "authority:", ErrHashOn},
		{ConsistentHash, "client_ip:v4", ErrHashOn},
		{ConsistentHash, "Path", ErrHashOn},
		{ConsistentHash, "ip", ErrHashOn},
		{RoundRobin, "path", ErrHashOn},
		{"", "path", ErrHashOn},
		{LeastRequest, "header:X-User", ErrHashOn},
		{EWMA, "client_ip", ErrHashOn},
		{Random, "cookie:a", ErrHashOn},
	} {
		t.Run(tc.name+"/"+tc.hashOn, func(t *testing.T) {
			p, err := New(tc.name, Options{HashOn: tc.hashOn})
			if tc.want == nil {
				if err != nil || p == nil {
					t.Fatalf("New = %v, %v; want a policy", p, err)
				}
				return
			}
			if !errors.Is(err, tc.want) || p != nil {
				t.Fatalf("New = %v, %v; want error %v", p, err, tc.want)
			}
			t.Log(err)
		})
	}
}

func TestNames(t *testing.T) {
	want := []string{ConsistentHash, EWMA, LeastRequest, Random, RoundRobin}
	if got := Names(); !slices.Equal(got, want) {
		t.Fatalf("Names() = %v, want %v", got, want)
	}
	for _, n := range Names() {
		pc := policyCase{name: n}
		if n == ConsistentHash {
			pc.opts.HashOn = "path"
		}
		mustNew(t, pc)
	}
}

// TestL01WeightsHonouredByEveryPolicy: A weight 300, B weight 100, 4,000
// requests: A gets 75% ± 3% under every policy, both when every request
// finishes before the next (nothing in flight) and under a closed loop of 32
// concurrent requests finishing in order.
func TestL01WeightsHonouredByEveryPolicy(t *testing.T) {
	const picks = 4000
	reqs := keyedRequests(picks)
	for _, pc := range allPolicies {
		for _, concurrency := range []int{0, 32} {
			t.Run(fmt.Sprintf("%s/inflight=%d", pc.name, concurrency), func(t *testing.T) {
				fs, cs := fakes(300, 100)
				pk := mustNew(t, pc).Picker(cs)
				var open []int // picked, not finished (FIFO)
				counts := make([]int, len(cs))
				for i := range picks {
					k := pk.Pick(reqs[i], Skip{})
					if k < 0 {
						t.Fatalf("pick %d: -1", i)
					}
					counts[k]++
					fs[k].n.Add(1)
					open = append(open, k)
					if len(open) > concurrency {
						fs[open[0]].n.Add(-1)
						open = open[1:]
					}
				}
				share := float64(counts[0]) / picks
				t.Logf("A %d, B %d: %.1f%%", counts[0], counts[1], 100*share)
				if math.Abs(share-0.75) > 0.03 {
					t.Errorf("A got %.1f%% of %d picks, want 75%% ± 3%%", 100*share, picks)
				}
			})
		}
	}
}

// TestIneligibleSkipped: every policy returns only eligible candidates, -1
// when none is eligible, and follows health flips without a new picker.
func TestIneligibleSkipped(t *testing.T) {
	reqs := keyedRequests(2000)
	for _, pc := range allPolicies {
		t.Run(pc.name, func(t *testing.T) {
			fs, cs := fakes(1, 2, 3, 4, 5)
			pk := mustNew(t, pc).Picker(cs)
			check := func(eligible ...int) {
				t.Helper()
				seen := map[int]int{}
				for _, r := range reqs {
					k := pk.Pick(r, Skip{})
					if k < 0 {
						if len(eligible) > 0 {
							t.Fatalf("Pick = -1 with %v eligible", eligible)
						}
						continue
					}
					if len(eligible) == 0 || !fs[k].Eligible() {
						t.Fatalf("Pick = %d, an ineligible candidate (eligible: %v)", k, eligible)
					}
					seen[k]++
				}
				for _, k := range eligible {
					if seen[k] == 0 {
						t.Errorf("eligible candidate %d never picked: %v", k, seen)
					}
				}
			}
			fs[1].down.Store(true)
			fs[4].down.Store(true)
			check(0, 2, 3)
			for _, f := range fs {
				f.down.Store(true)
			}
			check()
			fs[3].down.Store(false)
			check(3)
			for _, f := range fs {
				f.down.Store(false)
			}
			check(0, 1, 2, 3, 4)
		})
	}
}

func TestSmallSets(t *testing.T) {
	r := keyedRequests(1)[0]
	for _, pc := range allPolicies {
		t.Run(pc.name, func(t *testing.T) {
			p := mustNew(t, pc)
			if k := p.Picker(nil).Pick(r, Skip{}); k != -1 {
				t.Errorf("empty set: Pick = %d, want -1", k)
			}
			fs, cs := fakes(7)
			pk := p.Picker(cs)
			for range 10 {
				if k := pk.Pick(r, Skip{}); k != 0 {
					t.Fatalf("single candidate: Pick = %d, want 0", k)
				}
			}
			fs[0].down.Store(true)
			if k := pk.Pick(r, Skip{}); k != -1 {
				t.Errorf("single ineligible candidate: Pick = %d, want -1", k)
			}
		})
	}
}

// TestConcurrentPicks runs picks from many goroutines while candidates
// change state; run with -race.
func TestConcurrentPicks(t *testing.T) {
	reqs := keyedRequests(500)
	for _, pc := range allPolicies {
		t.Run(pc.name, func(t *testing.T) {
			fs, cs := fakes(1, 1, 1, 2, 3, 1, 1, 1)
			pk := mustNew(t, pc).Picker(cs)
			stop := make(chan struct{})
			var flips sync.WaitGroup
			flips.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					f := fs[i%len(fs)]
					f.down.Store(i%3 == 0)
					f.w.Store(int64(1 + i%4))
					f.setLat(float64(i % 5 * 1e6))
				}
			})
			var pickers sync.WaitGroup
			for range 8 {
				pickers.Go(func() {
					for i := range 3000 {
						k := pk.Pick(reqs[i%len(reqs)], Skip{})
						if k < -1 || k >= len(cs) {
							t.Errorf("Pick = %d out of range", k)
							return
						}
						if k >= 0 {
							fs[k].n.Add(1)
							fs[k].n.Add(-1)
						}
					}
				})
			}
			pickers.Wait()
			close(stop)
			flips.Wait()
		})
	}
}

// TestPickDoesNotAllocate checks every policy's Pick with testing.AllocsPerRun.
func TestPickDoesNotAllocate(t *testing.T) {
	r := keyedRequests(1)[0]
	for _, pc := range allPolicies {
		for _, n := range []int{3, 30} {
			weights := make([]int, n)
			for i := range weights {
				weights[i] = 1 + i%3
			}
			fs, cs := fakes(weights...)
			fs[1].down.Store(true)
			pk := mustNew(t, pc).Picker(cs)
			if a := testing.AllocsPerRun(1000, func() { pk.Pick(r, Skip{}) }); a != 0 {
				t.Errorf("%s n=%d: %v allocs per Pick, want 0", pc.name, n, a)
			}
		}
	}
}

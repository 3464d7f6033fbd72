package balance

import (
	"fmt"
	"net/http"
	"testing"
)

// benchSet returns n eligible candidates with weights 1 (uniform) or 1…3
// (weighted) and varied in-flight counts and latencies.
func benchSet(n int, weighted bool) []Candidate {
	weights := make([]int, n)
	for i := range weights {
		weights[i] = 1
		if weighted {
			weights[i] = 1 + i%3
		}
	}
	fs, cs := fakes(weights...)
	for i, f := range fs {
		f.n.Store(int64(i % 4))
		f.setLat(float64(1e6 + i*1e4))
	}
	return cs
}

var benchPolicies = []struct {
	name     string
	pc       policyCase
	weighted bool
}{
	{"round_robin", policyCase{RoundRobin, Options{}}, false},
	{"round_robin_weighted", policyCase{RoundRobin, Options{}}, true},
	{"random", policyCase{Random, Options{}}, true},
	{"least_request", policyCase{LeastRequest, Options{}}, true},
	{"consistent_hash", policyCase{ConsistentHash, Options{HashOn: "header:X-User"}}, true},
	{"consistent_hash_cookie", policyCase{ConsistentHash, Options{HashOn: "cookie:sid"}}, true},
	{"ewma", policyCase{EWMA, Options{}}, true},
}

func benchRequest() *http.Request {
	return &http.Request{Header: http.Header{
		"X-User": {"user-12345"},
		"Cookie": {"theme=dark; lang=en; sid=0123456789abcdef; other=1"},
	}}
}

// BenchmarkPick measures Pick alone, single goroutine.
func BenchmarkPick(b *testing.B) {
	r := benchRequest()
	for _, bp := range benchPolicies {
		for _, n := range []int{3, 30, 300} {
			b.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(b *testing.B) {
				pk := mustNew(b, bp.pc).Picker(benchSet(n, bp.weighted))
				b.ReportAllocs()
				for b.Loop() {
					pk.Pick(r, Skip{})
				}
			})
		}
	}
}

// BenchmarkPickParallel measures Pick from all Ps at once on 30 candidates
// (contention on shared picker state).
func BenchmarkPickParallel(b *testing.B) {
	r := benchRequest()
	for _, bp := range benchPolicies {
		b.Run(bp.name+"/n=30", func(b *testing.B) {
			pk := mustNew(b, bp.pc).Picker(benchSet(30, bp.weighted))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					pk.Pick(r, Skip{})
				}
			})
		})
	}
}

// BenchmarkConsistentHashBuild measures building a Maglev table.
func BenchmarkConsistentHashBuild(b *testing.B) {
	for _, n := range []int{3, 30, 300} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			p := mustNew(b, policyCase{ConsistentHash, Options{HashOn: "path"}})
			cs := benchSet(n, true)
			b.ReportAllocs()
			for b.Loop() {
				p.Picker(cs)
			}
		})
	}
}

// BenchmarkRoundRobinLive measures round_robin while weights keep changing
// (slow start): the O(n) live algorithm under its mutex. One weight changes
// every 1024 picks so the picker never settles on a new cycle.
func BenchmarkRoundRobinLive(b *testing.B) {
	for _, n := range []int{3, 30, 300} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			cs := benchSet(n, true)
			pk := mustNew(b, policyCase{RoundRobin, Options{}}).Picker(cs)
			f := cs[0].(*fake)
			base := f.w.Load()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if i++; i%1024 == 0 {
					f.w.Store(base + 1 + int64(i/1024%2))
				}
				pk.Pick(nil, Skip{})
			}
		})
	}
}

package balance

import (
	"net/http"
	"testing"
)

type cand struct{ w int }

func (c cand) Weight() int     { return c.w }
func (c cand) InFlight() int64 { return 0 }

func TestRoundRobinEven(t *testing.T) {
	p, err := New("round_robin")
	if err != nil {
		t.Fatal(err)
	}
	cs := []Candidate{cand{1}, cand{1}, cand{1}}
	counts := make([]int, len(cs))
	for i := 0; i < 300; i++ {
		counts[p.Pick(cs, nil)]++
	}
	for i, n := range counts {
		if n != 100 {
			t.Errorf("backend %d got %d picks, want 100", i, n)
		}
	}
}

func TestUnknownPolicy(t *testing.T) {
	if _, err := New("fastest"); err == nil {
		t.Fatal("New(fastest) succeeded")
	}
}

func BenchmarkRoundRobin30(b *testing.B) {
	p, _ := New(RoundRobin)
	cs := make([]Candidate, 30)
	for i := range cs {
		cs[i] = cand{1}
	}
	r := &http.Request{}
	b.ReportAllocs()
	for b.Loop() {
		p.Pick(cs, r)
	}
}

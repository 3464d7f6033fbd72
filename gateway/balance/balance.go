// Package balance holds the load-balancing policies that pick one backend
// from an upstream's eligible set. A policy is a small type registered by
// name; New rejects unknown names so configuration can be checked early.
package balance

import (
	"fmt"
	"net/http"
	"sort"
	"sync/atomic"
)

// Candidate is what a policy sees of a backend. Implementations must be
// safe for concurrent use.
type Candidate interface {
	// Weight is the backend's relative weight, ≥ 1.
	Weight() int
	// InFlight is the number of requests currently in flight to it.
	InFlight() int64
}

// Policy picks an index into candidates, which is never empty and holds only
// eligible backends. Pick must be safe for concurrent use.
type Policy interface {
	Pick(candidates []Candidate, r *http.Request) int
}

// Names of the policies, as written in `load_balancing`.
const (
	RoundRobin = "round_robin"
)

var registry = map[string]func() Policy{
	RoundRobin: func() Policy { return &roundRobin{} },
}

// New returns a fresh policy instance by name. Errors: an unknown or not yet
// implemented name (the error lists the known ones).
func New(name string) (Policy, error) {
	if name == "" {
		name = RoundRobin
	}
	f, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("balance: unknown load_balancing policy %q (known: %v)", name, Names())
	}
	return f(), nil
}

// Names lists the implemented policies in lexical order.
func Names() []string {
	var n []string
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// roundRobin cycles through the candidates in order. It is shared by all
// requests of one upstream; the counter is its only state.
type roundRobin struct{ next atomic.Uint64 }

func (p *roundRobin) Pick(c []Candidate, _ *http.Request) int {
	return int((p.next.Add(1) - 1) % uint64(len(c)))
}

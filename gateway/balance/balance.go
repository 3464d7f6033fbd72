// Package balance holds the load-balancing policies that pick one backend of
// an upstream for a request.
//
// A policy is a small type registered by name (practice 9 "Small policies"):
// New checks the name and its options once, at configuration time. For every
// immutable candidate set (a membership change) the caller asks the policy
// for a Picker; requests then call Picker.Pick, which only ever returns an
// eligible candidate. Health flips and ejections never rebuild a Picker
// (practice 10): they change what Candidate.Eligible reports and the picker
// skips the candidate.
//
// Policies:
//
//   - round_robin: smooth weighted round-robin (nginx); equal weights give a
//     strict, lock-free rotation.
//   - random: weighted random.
//   - least_request: power of two choices (Mitzenmacher) on in-flight
//     requests per unit of weight.
//   - consistent_hash: Maglev lookup table (Eisenbud et al., NSDI 2016) over
//     a key taken from the request (Options.HashOn).
//   - ewma: power of two choices on peak-EWMA latency (Finagle/Linkerd).
//
// Every policy honours Candidate.Weight. Pick never allocates and is safe for
// concurrent use.
package balance

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// Names of the policies, as written in `load_balancing`.
const (
	RoundRobin     = "round_robin"
	Random         = "random"
	LeastRequest   = "least_request"
	ConsistentHash = "consistent_hash"
	EWMA           = "ewma"
)

// Errors returned (wrapped, with details) by New. Callers may branch on them
// with errors.Is.
var (
	// ErrUnknownPolicy: the name is not one of Names().
	ErrUnknownPolicy = errors.New("balance: unknown load_balancing policy")
	// ErrHashOn: hash_on is missing or malformed for consistent_hash, or was
	// given for a policy that does not hash.
	ErrHashOn = errors.New("balance: invalid hash_on")
)

// Candidate is what a policy sees of one backend. Methods are called on the
// hot path and must be cheap and safe for concurrent use.
type Candidate interface {
	// Key is the backend's stable identity. consistent_hash derives the
	// backend's place in its table from it with a deterministic hash
	// (FNV-1a 64, no per-process seed), so the same set of keys maps requests
	// the same way on every gateway instance.
	Key() string
	// Weight is the effective relative weight at this moment, ≥ 1 (smaller
	// values are treated as 1). It may change between picks (slow start);
	// consistent_hash reads it only when its Picker is built.
	Weight() int
	// InFlight is the number of requests in flight to the backend now.
	InFlight() int64
	// Eligible reports whether the backend may receive traffic now.
	// Membership, health and ejection are decided by the caller.
	Eligible() bool
	// LatencyEWMA is the peak-EWMA latency in nanoseconds maintained by the
	// caller; 0 means no sample yet. The caller should feed it from every
	// finished request, failures included: a backend that never gets a
	// sample keeps being preferred by ewma while it is idle.
	LatencyEWMA() float64
}

// Options configure a policy.
type Options struct {
	// HashOn selects the request key of consistent_hash, and must be empty
	// for every other policy. One of:
	//
	//   header:NAME  first value of request header NAME
	//   cookie:NAME  value of cookie NAME (first match, quotes removed)
	//   query:NAME   first value of query parameter NAME (percent-decoded)
	//   path         the URL path
	//   authority    the request's host[:port] (ASCII case-insensitive)
	//   client_ip    the client address without its port
	//
	// A request without the key (or with an empty value) gets a weighted
	// random eligible backend.
	HashOn string
}

// Policy is a named selection policy with its options applied. It is
// immutable and safe for concurrent use.
type Policy interface {
	// Picker returns the picker for one immutable candidate set. It is
	// called once per set (when membership changes), never per request;
	// health flips do not rebuild it. The picker keeps c: the caller must not
	// modify the slice afterwards. Index i of Pick refers to c[i]. An empty
	// set yields a picker that always returns -1.
	Picker(c []Candidate) Picker
}

// Picker selects a backend from the candidate set it was built for.
type Picker interface {
	// Pick returns the index in the set of an eligible candidate for r that
	// skip does not hold, or -1 when there is none. r may be nil for
	// policies that do not look at the request. Skipped candidates are
	// passed over as ineligible ones are, without changing the policy's
	// state for them. Pick does not allocate and is safe for concurrent use.
	Pick(r *http.Request, skip Skip) int
}

// registry maps a policy name to its constructor. Constructors receive the
// already validated Options.
var registry = map[string]func(o Options) (Policy, error){
	RoundRobin:     func(Options) (Policy, error) { return roundRobin{}, nil },
	Random:         func(Options) (Policy, error) { return random{}, nil },
	LeastRequest:   func(Options) (Policy, error) { return leastRequest{}, nil },
	ConsistentHash: newConsistentHash,
	EWMA:           func(Options) (Policy, error) { return peakEWMA{}, nil },
}

// New returns the policy called name, configured by o. The empty name means
// round_robin. Errors (wrapping ErrUnknownPolicy or ErrHashOn): an unknown
// name; consistent_hash without hash_on or with a malformed one; hash_on
// given for another policy.
func New(name string, o Options) (Policy, error) {
	if name == "" {
		name = RoundRobin
	}
	f, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownPolicy, name, strings.Join(Names(), ", "))
	}
	if name != ConsistentHash && o.HashOn != "" {
		return nil, fmt.Errorf("%w: hash_on %q is only valid with %s, not %s", ErrHashOn, o.HashOn, ConsistentHash, name)
	}
	return f(o)
}

// Names lists the policies in lexical order.
func Names() []string {
	n := make([]string, 0, len(registry))
	for k := range registry {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// weightOf returns c's weight, treating values below 1 as 1.
func weightOf(c Candidate) int64 {
	if w := c.Weight(); w > 1 {
		return int64(w)
	}
	return 1
}

// trivialPicker returns the picker for sets of zero or one candidate, where
// no policy has a choice to make, and false for larger sets.
func trivialPicker(c []Candidate) (Picker, bool) {
	switch len(c) {
	case 0:
		return nonePicker{}, true
	case 1:
		return singlePicker{c[0]}, true
	}
	return nil, false
}

// nonePicker serves the empty set.
type nonePicker struct{}

func (nonePicker) Pick(*http.Request, Skip) int { return -1 }

// singlePicker serves a set of one.
type singlePicker struct{ c Candidate }

func (p singlePicker) Pick(_ *http.Request, skip Skip) int {
	if p.c.Eligible() && !skip.Has(0) {
		return 0
	}
	return -1
}

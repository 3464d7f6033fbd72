package observe

import (
	"slices"
	"sync/atomic"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// Traffic holds the status page's response counters per upstream, by
// name, so they outlive the reloads that rebuild an upstream (a backend's
// own are upstream.Backend.Responses).
type Traffic struct {
	m atomic.Pointer[map[string]*upstream.ResponseCounter]
}

// Keep publishes the counters of the named upstreams, reusing the current
// ones by name. Called before a route table naming them is published, so
// every request routed by it finds its counter.
func (tr *Traffic) Keep(names []string) {
	old := tr.m.Load()
	if old != nil && len(*old) == len(names) && !slices.ContainsFunc(names, func(n string) bool { return (*old)[n] == nil }) {
		return // the same names (they are distinct): the same map
	}
	m := make(map[string]*upstream.ResponseCounter, len(names))
	for _, name := range names {
		if old != nil && (*old)[name] != nil {
			m[name] = (*old)[name]
		} else {
			m[name] = new(upstream.ResponseCounter)
		}
	}
	tr.m.Store(&m)
}

// Of is the named upstream's counter (nil: unknown).
func (tr *Traffic) Of(name string) *upstream.ResponseCounter {
	if m := tr.m.Load(); m != nil {
		return (*m)[name]
	}
	return nil
}

// Load returns the cumulative response counts of every upstream, by name,
// since the upstream name first appeared in the configuration.
func (tr *Traffic) Load() map[string]upstream.ResponseCounts {
	m := tr.m.Load()
	if m == nil {
		return map[string]upstream.ResponseCounts{}
	}
	out := make(map[string]upstream.ResponseCounts, len(*m))
	for name, c := range *m {
		out[name] = c.Load()
	}
	return out
}

// record counts o on its upstream and backend, and every try before the
// relayed one that the backend answered or failed by (a backend failing
// every try that a retry hides must not look clean). A reason means the
// gateway produced the answer. Two atomic adds each and a map lookup: no
// allocation.
func (tr *Traffic) record(o *Outcome) {
	for i := range o.nAttempts {
		a := &o.attempts[i]
		if !a.Final && !a.Lost && (a.Answered || a.Verdict == health.Failure) {
			a.Backend.Responses().Count(a.Status, !a.Answered)
		}
	}
	byGateway := o.Reason != ""
	if o.Backend != nil && o.Status != transport.StatusClientClosed {
		// A client that left got nothing from the backend: its row counts
		// answers (the upstream's, what clients got).
		o.Backend.Responses().Count(o.Status, byGateway)
	}
	if o.Upstream != nil {
		if c := tr.Of(o.Upstream.Name()); c != nil {
			c.Count(o.Status, byGateway)
		}
	}
}

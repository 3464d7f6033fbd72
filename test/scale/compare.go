package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"
)

// consulRouting returns, for every service name, the instances Consul
// reports passing as "node/serviceID", sorted. It reads every check with
// one /v1/health/state/any (directly, not through the counting proxy): an
// instance passes when every check of its service instance and of its node
// passes; every instance the benchmark registers has exactly one check, so
// the instance list is complete.
func consulRouting(cc *api.Client) (map[string][]string, error) {
	checks, _, err := cc.Health().State(api.HealthAny, nil)
	if err != nil {
		return nil, err
	}
	nodeOK := map[string]bool{}
	type inst struct {
		name, node string
		ok         bool
	}
	insts := map[string]*inst{} // by node/serviceID
	for _, c := range checks {
		if _, seen := nodeOK[c.Node]; !seen {
			nodeOK[c.Node] = true
		}
		if c.ServiceID == "" {
			nodeOK[c.Node] = nodeOK[c.Node] && c.Status == api.HealthPassing
			continue
		}
		key := c.Node + "/" + c.ServiceID
		in := insts[key]
		if in == nil {
			in = &inst{name: c.ServiceName, node: c.Node, ok: true}
			insts[key] = in
		}
		in.ok = in.ok && c.Status == api.HealthPassing
	}
	out := map[string][]string{}
	for key, in := range insts {
		if in.ok && nodeOK[in.node] {
			out[in.name] = append(out[in.name], key)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out, nil
}

// agentRouting returns every upstream's backends, sorted.
func (a *agentProc) routing() (map[string][]string, error) {
	ups, err := a.upstreams()
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, u := range ups {
		b := slices.Clone(u.Backends)
		slices.Sort(b)
		out[u.Name] = b
	}
	return out, nil
}

// compareRouting compares every configured upstream's backends with the
// instances Consul reports passing, and Consul's with what the benchmark
// set (expect: the passing instances of service i, by instance index; nil
// for a deregistered service). It returns one line per mismatch.
func compareRouting(ag *agentProc, cc *api.Client, reg registry, n int, expect func(i int) []int) ([]string, error) {
	got, err := ag.routing()
	if err != nil {
		return nil, err
	}
	want, err := consulRouting(cc)
	if err != nil {
		return nil, err
	}
	var out []string
	for i := range n {
		name := serviceName(i)
		var mine []string
		for _, k := range expect(i) {
			mine = append(mine, reg.key(name, k, instanceID(i, k)))
		}
		slices.Sort(mine)
		switch {
		case !slices.Equal(got[name], want[name]):
			out = append(out, fmt.Sprintf("%s: agent %v, consul %v", name, got[name], want[name]))
		case !slices.Equal(want[name], mine):
			out = append(out, fmt.Sprintf("%s: consul %v, set by the benchmark %v", name, want[name], mine))
		}
	}
	return out, nil
}

// routingCheck is the outcome of waiting for the agent's routing to equal
// Consul's.
type routingCheck struct {
	mismatches []string      // of the last comparison; empty when equal
	took       time.Duration // until equal (or until giving up)
	upstreams  int
}

// waitRouting compares until the routing equals Consul's or timeout
// passes (a wait for a condition: the last changes may still be
// propagating).
func waitRouting(ag *agentProc, cc *api.Client, reg registry, n int, expect func(i int) []int, timeout time.Duration) (routingCheck, error) {
	t0 := time.Now()
	rc := routingCheck{upstreams: n}
	var cerr error
	_ = waitUntil(timeout, 100*time.Millisecond, func() bool {
		rc.mismatches, cerr = compareRouting(ag, cc, reg, n, expect)
		return cerr == nil && len(rc.mismatches) == 0
	})
	rc.took = time.Since(t0)
	return rc, cerr
}

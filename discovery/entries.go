package discovery

import (
	"cmp"
	"maps"
	"slices"

	"github.com/hashicorp/consul/api"
)

// keptEntry is what a watch keeps of one /v1/health/service entry: the
// instance and the status of each of its checks (node and service), so
// that the change feed can apply a check's new status without a re-read
// (feedSub.patch). Check output and definitions are not kept.
type keptEntry struct {
	in         Instance // Weight is Weights.Passing, or 1
	warnWeight int      // Weights.Warning
	checks     []keptCheck
}

// keptCheck is one check of an entry; its node is the entry's.
type keptCheck struct{ id, name, status string }

// checkPatch is a check status the change feed reported after the watch's
// last read: at is the raft index it was seen at (the check's ModifyIndex,
// or the answer's index for a check that left a status).
type checkPatch struct {
	status string
	at     uint64
}

// compact converts health entries into entries, dropping nil parts and
// instances that lack one of q's tags.
func compact(q Query, entries []*api.ServiceEntry) []keptEntry {
	out := make([]keptEntry, 0, len(entries))
	for _, e := range entries {
		if e == nil || e.Node == nil || e.Service == nil || !hasAllTags(e.Service.Tags, q.Tags) {
			continue
		}
		en := keptEntry{in: Instance{
			ID:        e.Node.Node + "/" + e.Service.ID,
			Node:      e.Node.Node,
			ServiceID: e.Service.ID,
			Address:   cmp.Or(e.Service.Address, e.Node.Address),
			Port:      e.Service.Port,
			Tags:      slices.Clone(e.Service.Tags),
			Meta:      maps.Clone(e.Service.Meta),
			Weight:    max(e.Service.Weights.Passing, 1),
		}, warnWeight: e.Service.Weights.Warning}
		en.checks = make([]keptCheck, 0, len(e.Checks))
		for _, c := range e.Checks {
			if c != nil {
				en.checks = append(en.checks, keptCheck{id: c.CheckID, name: c.Name, status: c.Status})
			}
		}
		out = append(out, en)
	}
	return out
}

// judge applies q's health policy to ents, with the check statuses of
// patches (keyed by node and check ID) over the ones read: the usable
// instances and the excluded ones, each sorted by ID.
func judge(q Query, ents []keptEntry, patches map[checkKey]checkPatch) healthResult {
	r := healthResult{ins: make([]Instance, 0, len(ents))}
	var checks api.HealthChecks
	for _, en := range ents {
		checks = checks[:0]
		for _, c := range en.checks {
			st := c.status
			if p, ok := patches[checkKey{en.in.Node, c.id}]; ok {
				st = p.status
			}
			checks = append(checks, &api.HealthCheck{CheckID: c.id, Name: c.name, Status: st})
		}
		status := checks.AggregatedStatus() // maintenance wins, then worst status
		if admits(q.Health, status) {
			in := en.in
			if status == api.HealthWarning {
				in.Weight = en.warnWeight
			}
			if in.Weight == 0 {
				in.Weight = 1
			}
			r.ins = append(r.ins, in)
			continue
		}
		x := Excluded{Instance: en.in, Status: cmp.Or(status, api.HealthCritical)}
		for _, c := range checks {
			if c.Status != api.HealthPassing {
				x.Checks = append(x.Checks, cmp.Or(c.Name, c.CheckID)+": "+c.Status)
			}
		}
		slices.Sort(x.Checks)
		r.excl = append(r.excl, x)
	}
	slices.SortFunc(r.ins, func(a, b Instance) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(r.excl, func(a, b Excluded) int { return cmp.Compare(a.ID, b.ID) })
	return r
}

// knows reports whether ents hold check id on node under the same name,
// as a node check or a check of one of the node's instances (serviceID,
// "" for a node check): only then can a status be patched in.
func knows(ents []keptEntry, node, id, name, serviceID string) bool {
	for _, en := range ents {
		if en.in.Node != node || (serviceID != "" && en.in.ServiceID != serviceID) {
			continue
		}
		for _, c := range en.checks {
			if c.id == id {
				return c.name == name
			}
		}
	}
	return false
}

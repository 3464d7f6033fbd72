package discovery

import (
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// How the checks answers move the watches (feed.go has the overview).
//
// A check that enters a status, or leaves one, changed status and nothing
// else: a watch that read it patches the new status in (feedSub.patch) and
// makes no request. Anything else (a check the watch never read, one whose
// name or service changed) asks for a re-read.
//
// A check's new status is plain when it enters a status: the answer says
// it. When it leaves one, it went to the other followed status, or to
// passing, or was deregistered; the answer alone does not say which. The
// other status's answer does, once it covers the same raft index:
//   - that answer came already: the check is in it (its own patch), or it
//     is passing now (or gone: fetchMoved's admitGrace gives the catalog
//     answer of a deregistration the time to ask for a re-read);
//   - no check has the other status: Consul's memdb then watches the root
//     of its status index, so that query wakes on every check write and
//     answers for this index within milliseconds. The leave waits for it
//     (leaves), at most attributeWait, then asks for a re-read;
//   - otherwise that query may not wake at all (only a change in its status
//     wakes it): the watches re-read.

// leave is a check that left status from (an index of feedStates) in the
// answer at index at, waiting for the other status's answer to cover at.
type leave struct {
	from     int
	key      checkKey
	info     checkInfo
	at       uint64
	deadline time.Time
}

// onChecks diffs an answer of checks query q (an index of feedStates)
// against its last one and patches or moves the services whose checks
// changed.
func (f *feed) onChecks(q int, now map[checkKey]checkInfo, index uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old, prev := f.checks[q], f.checksIdx[q]
	f.checks[q], f.checksIdx[q] = now, index
	close(f.advanced)
	f.advanced = make(chan struct{})
	if old == nil {
		return // the baseline: every watch reads once on its own
	}
	touch := func(at uint64, service string) {
		if service != "" && at > prev {
			f.touched[at] = append(f.touched[at], service)
		}
	}
	for k, n := range now {
		touch(n.modify, n.service)
		o, had := old[k]
		switch {
		case !had:
			f.changeLocked(k, n, feedStates[q], n.modify, n.modify)
		case !o.same(n):
			f.moveLocked(k.node, n, n.modify)
			if o.service != n.service {
				f.moveLocked(k.node, o, 0)
			}
		}
	}
	for k, o := range old {
		if _, ok := now[k]; !ok {
			touch(index, o.service)
			f.leftLocked(q, k, o, index)
		}
	}
	f.resolveLocked(q)
	if len(f.touched) > touchedKeep {
		keys := slices.Sorted(maps.Keys(f.touched))
		for _, k := range keys[:len(keys)-touchedKeep] {
			delete(f.touched, k)
		}
	}
}

// other is the index in feedStates of the status that is not q's.
func other(q int) int { return 1 - q }

// leftLocked handles check k leaving status q in the answer at index.
func (f *feed) leftLocked(q int, k checkKey, ci checkInfo, index uint64) {
	o := other(q)
	switch {
	case k.id == api.NodeMaint || strings.HasPrefix(k.id, api.ServiceMaintPrefix):
		// Maintenance is a critical check that only leaves by being
		// deregistered, and counts by its ID whatever its status.
		f.moveLocked(k.node, ci, 0)
	case f.checks[o] != nil && f.checksIdx[o] >= index:
		if _, in := f.checks[o][k]; !in {
			f.changeLocked(k, ci, api.HealthPassing, index, 0)
		}
	case f.checks[o] != nil && len(f.checks[o]) == 0:
		f.leaves = append(f.leaves, leave{from: q, key: k, info: ci, at: index, deadline: time.Now().Add(attributeWait)})
		if f.leaveT == nil && !f.stopped {
			f.leaveT = time.AfterFunc(attributeWait, f.expireLeaves)
		}
	default:
		f.moveLocked(k.node, ci, 0)
	}
}

// resolveLocked settles the leaves from the other status that the answer of
// query q (just recorded) covers.
func (f *feed) resolveLocked(q int) {
	f.leaves = slices.DeleteFunc(f.leaves, func(l leave) bool {
		if l.from == q || f.checksIdx[q] < l.at {
			return false
		}
		if _, in := f.checks[q][l.key]; !in {
			f.changeLocked(l.key, l.info, api.HealthPassing, l.at, 0)
		}
		return true
	})
}

// expireLeaves re-reads the services of leaves whose other answer did not
// come in time.
func (f *feed) expireLeaves() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaveT = nil
	if f.stopped {
		return
	}
	now := time.Now()
	var next time.Time
	f.leaves = slices.DeleteFunc(f.leaves, func(l leave) bool {
		if now.Before(l.deadline) {
			if next.IsZero() || l.deadline.Before(next) {
				next = l.deadline
			}
			return false
		}
		f.moveLocked(l.key.node, l.info, 0)
		return true
	})
	if !next.IsZero() {
		f.leaveT = time.AfterFunc(time.Until(next), f.expireLeaves)
	}
}

// stopLeaves stops the leaves' timer for good.
func (f *feed) stopLeaves() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	if f.leaveT != nil {
		f.leaveT.Stop()
		f.leaveT = nil
	}
}

// changeLocked applies check k's status, seen at raft index at, to the
// watches of its service (a node check: of every service with an instance
// on its node): each that read the check patches it in, the others re-read
// (want: the service index the change implies, 0 for none).
func (f *feed) changeLocked(k checkKey, ci checkInfo, status string, at, want uint64) {
	f.eachLocked(k.node, ci.service, func(s *feedSub) {
		if !s.patch(k.node, k.id, ci.name, ci.serviceID, status, at) {
			s.signal(want)
		}
	})
}

// moveLocked asks the watches of the check's service (a node check: of
// every service on node) for a re-read.
func (f *feed) moveLocked(node string, ci checkInfo, want uint64) {
	f.eachLocked(node, ci.service, func(s *feedSub) { s.signal(want) })
}

// eachLocked calls do for every watch of service, or, for a node check
// (service ""), every watch whose last read has an instance on node.
func (f *feed) eachLocked(node, service string, do func(*feedSub)) {
	if service != "" {
		for s := range f.subs[service] {
			do(s)
		}
		return
	}
	for _, subs := range f.subs {
		for s := range subs {
			if s.on(node) {
				do(s)
			}
		}
	}
}

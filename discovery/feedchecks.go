package discovery

import (
	"maps"
	"slices"
)

// How the checks answers move the watches (feed.go has the overview).
//
// A check that enters a status (critical or warning) changed status and
// nothing else: a watch that read it patches the new status in
// (feedSub.patch) and makes no request. This only ever takes an instance
// out of service or lowers its weight: the check exists, with that status.
//
// Anything that may put an instance back is re-read: a check that leaves a
// status, or enters a less severe one. Leaving a status means passing again,
// the other followed status, or deregistered with its instance, and the
// status answers alone cannot tell a check that passes from one deleted by
// the instance's deregistration (the catalog answer that shows the latter
// may come any time later). Checks the watch never read, renamed ones and
// maintenance are re-read as well.

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
			f.moveLocked(k.node, o, 0) // passing again, the other status, or deregistered
		}
	}
	if len(f.touched) > touchedKeep {
		keys := slices.Sorted(maps.Keys(f.touched))
		for _, k := range keys[:len(keys)-touchedKeep] {
			delete(f.touched, k)
		}
	}
}

// changeLocked applies check k's status, seen at raft index at, to the
// watches of its service (a node check: of every service with an instance
// on its node): each that read the check with a status no worse patches it
// in, the others re-read (want: the service index the change implies).
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

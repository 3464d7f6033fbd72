package discovery

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/consul/api"
)

// feedSub is one watch's subscription to its scope's change feed. A move
// reaches it in one of two ways:
//   - signal: something the feed cannot describe changed (an instance
//     registered or modified, a check renamed or unknown to the watch):
//     the watch re-reads its service;
//   - patch: a check the watch read entered a worse status and nothing
//     else changed: the feed's answer says all there is to know, and the
//     watch applies it to what it read without a request (entries.go,
//     judge). A change that may put an instance back is always re-read
//     (feedchecks.go).
type feedSub struct {
	service string
	tags    []string      // the watch's tag filter: a sweep ignores instances without them
	moved   chan struct{} // capacity 1: "look at the subscription"

	mu      sync.Mutex
	reread  bool                       // a move asked for a read
	want    uint64                     // the service index a move promised (0: none)
	index   uint64                     // X-Consul-Index of the last read
	ids     map[string]map[string]bool // node → service IDs the last read returned
	kept    []keptEntry                // the last read's entries
	patches map[checkKey]checkPatch    // statuses reported since the last read
	dirty   bool                       // patches the watch has not applied yet
}

func (s *feedSub) wake() {
	select {
	case s.moved <- struct{}{}:
	default:
	}
}

// signal asks s for a re-read; want is the service index the move implies
// (0: none).
func (s *feedSub) signal(want uint64) {
	s.mu.Lock()
	s.reread = true
	s.want = max(s.want, want)
	s.mu.Unlock()
	s.wake()
}

// severity orders check statuses as Consul's aggregation does (an unknown
// status counts as critical).
func severity(status string) int {
	switch status {
	case api.HealthPassing:
		return 0
	case api.HealthWarning:
		return 1
	default:
		return 2
	}
}

// patch records that check id on node (of instance serviceID, "" for a
// node check), named name, had status at raft index at. It reports false
// when s cannot apply it: no read yet, a check its last read did not return
// under that name, or a status less severe than the one s has for it
// (which may put an instance back); the caller asks for a re-read instead.
func (s *feedSub) patch(node, id, name, serviceID, status string, at uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !patching.Load() || s.index == 0 || !knows(s.kept, node, id, name, serviceID) {
		return false
	}
	if at <= s.index {
		return true // the last read has it already
	}
	k := checkKey{node, id}
	prev, ok := s.patches[k]
	if ok && prev.at >= at {
		return true
	}
	if !ok {
		prev.status = s.readStatus(node, id)
	}
	if severity(status) < severity(prev.status) {
		return false
	}
	if s.patches == nil {
		s.patches = map[checkKey]checkPatch{}
	}
	s.patches[k] = checkPatch{status: status, at: at}
	s.dirty = true
	s.wake()
	return true
}

// readStatus is the status of check id on node in the last read.
func (s *feedSub) readStatus(node, id string) string {
	for _, en := range s.kept {
		if en.in.Node != node {
			continue
		}
		for _, c := range en.checks {
			if c.id == id {
				return c.status
			}
		}
	}
	return ""
}

// on reports whether the last read returned an instance on node.
func (s *feedSub) on(node string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids[node]) > 0
}

// needsRead reports whether a move asked for a re-read, or promised a newer
// index than the last read returned.
func (s *feedSub) needsRead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reread || s.want > s.index
}

// reading marks the start of a read: the moves signalled so far are in its
// answer.
func (s *feedSub) reading() {
	s.mu.Lock()
	s.reread = false
	s.mu.Unlock()
	select {
	case <-s.moved:
	default:
	}
}

// patched returns q's result from the last read with every patch applied,
// and false when no patch came since the last result.
func (s *feedSub) patched(q Query) (healthResult, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.dirty {
		return healthResult{}, false
	}
	s.dirty = false
	r := judge(q, s.kept, s.patches)
	r.patched = true
	for _, p := range s.patches {
		r.at = max(r.at, p.at)
	}
	return r, true
}

// read records a read's index and entries, drops the patches it includes
// and returns r with the later ones applied.
func (s *feedSub) read(q Query, index uint64, r healthResult) healthResult {
	ids := map[string]map[string]bool{}
	for _, en := range r.kept {
		if ids[en.in.Node] == nil {
			ids[en.in.Node] = map[string]bool{}
		}
		ids[en.in.Node][en.in.ServiceID] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index, s.ids, s.kept = index, ids, r.kept
	if index >= s.want {
		s.want = 0
	}
	for k, p := range s.patches {
		if p.at <= index {
			delete(s.patches, k)
		}
	}
	s.dirty = false
	if len(s.patches) == 0 {
		return r
	}
	out := judge(q, s.kept, s.patches)
	out.kept = r.kept
	for _, p := range s.patches {
		out.at = max(out.at, p.at)
	}
	return out
}

// behind reports whether the last read is older than a move promised.
func (s *feedSub) behind() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.want > s.index
}

// settle drops what a move promised.
func (s *feedSub) settle() {
	s.mu.Lock()
	s.want = 0
	s.mu.Unlock()
}

// patching turns patches on. Off: every move is a re-read (3 requests per
// check flip). A 5,000-service run on one node (test/scale -churn 0 -idle
// 0) ended with 3 of 5,000 upstreams missing an instance Consul had back
// passing with patches on, and equal with them off; until that is
// understood the tests alone turn them on.
var patching atomic.Bool

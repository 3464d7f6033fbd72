package discovery

import (
	"slices"
	"strings"
	"testing"
)

// withPatches turns the feed's patches on for the test (patching).
func withPatches(t *testing.T) {
	was := patching.Swap(true)
	t.Cleanup(func() { patching.Store(was) })
}

// kept builds a kept entry of node and service ID; checks are "id=status"
// (named as their ID).
func kept(node, sid string, checks ...string) keptEntry {
	en := keptEntry{in: Instance{ID: node + "/" + sid, Node: node, ServiceID: sid, Weight: 1}}
	for _, c := range checks {
		id, status, _ := strings.Cut(c, "=")
		en.checks = append(en.checks, keptCheck{id: id, name: id, status: status})
	}
	return en
}

// readSub records a read of s at index returning ents.
func readSub(s *feedSub, index uint64, ents ...keptEntry) healthResult {
	return s.read(Query{Service: s.service, Health: HealthPassing}, index, healthResult{kept: ents})
}

// look drains s's wake-up and reports what it asks: a re-read (with the
// index promised) or patched results (the instance IDs they admit).
func look(t *testing.T, s *feedSub) (woke, reread bool, want uint64, admitted []string) {
	t.Helper()
	select {
	case <-s.moved:
	default:
		return false, false, 0, nil
	}
	s.mu.Lock()
	reread, want = s.reread, s.want
	s.reread = false
	s.mu.Unlock()
	if r, ok := s.patched(Query{Service: s.service, Health: HealthPassing}); ok {
		for _, in := range r.ins {
			admitted = append(admitted, in.ID)
		}
		if admitted == nil {
			admitted = []string{}
		}
	}
	return true, reread, want, admitted
}

func checkAnswer(kv ...any) map[checkKey]checkInfo {
	out := map[checkKey]checkInfo{}
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].(checkKey)
		out[k] = kv[i+1].(checkInfo)
	}
	return out
}

// TestFeedChecksDiff: what each kind of checks answer does to the watches:
// a check a watch read entering a worse status is patched in; anything that
// may put an instance back, and anything else, is a re-read.
func TestFeedChecksDiff(t *testing.T) {
	withPatches(t)
	f := newUnitFeed()
	web, api, db := f.subscribe("web", nil), f.subscribe("api", nil), f.subscribe("db", nil)
	readSub(web, 5, kept("n1", "web-1", "serfHealth=passing", "web:ttl=critical"))
	readSub(db, 5, kept("n2", "db-1", "serfHealth=passing", "db:ttl=passing"))
	webTTL := checkInfo{service: "web", serviceID: "web-1", status: "critical", name: "web:ttl", modify: 4}
	f.onChecks(0, checkAnswer(checkKey{"n1", "web:ttl"}, webTTL), 5)
	f.onChecks(1, checkAnswer(), 5) // the warning query's baseline: empty
	for _, s := range []*feedSub{web, api, db} {
		if woke, _, _, _ := look(t, s); woke {
			t.Fatalf("the baseline moved %s", s.service)
		}
	}
	// At 10: web's check leaves the critical answer (passing again, or
	// deregistered: a re-read), api gets a check it never read (a re-read at
	// 10), n2's node check fails (patched into db: excluded, no read).
	serf2 := checkInfo{status: "critical", name: "serfHealth", modify: 10}
	apiTTL := checkInfo{service: "api", serviceID: "api-1", status: "critical", name: "api:ttl", modify: 10, create: 10}
	f.onChecks(0, checkAnswer(checkKey{"n1", "api:ttl"}, apiTTL, checkKey{"n2", "serfHealth"}, serf2), 10)
	if woke, reread, want, _ := look(t, web); !woke || !reread || want != 0 {
		t.Errorf("web: woke %v reread %v want %d; a check leaving a status is a re-read promising nothing", woke, reread, want)
	}
	if woke, reread, want, _ := look(t, api); !woke || !reread || want != 10 {
		t.Errorf("api: woke %v reread %v want %d, want a re-read at 10 (a check it never read)", woke, reread, want)
	}
	if woke, reread, _, admitted := look(t, db); !woke || reread || admitted == nil || len(admitted) != 0 {
		t.Errorf("db: woke %v reread %v admitted %v, want n2's node check patched in: db-1 excluded, no read", woke, reread, admitted)
	}
	if got := f.touched[10]; !slices.Contains(got, "api") || !slices.Contains(got, "web") {
		t.Errorf("touched[10] = %v, want api (written) and web (removed)", got)
	}
	// The same answer again: nothing moves.
	f.onChecks(0, checkAnswer(checkKey{"n1", "api:ttl"}, apiTTL, checkKey{"n2", "serfHealth"}, serf2), 11)
	f.onChecks(1, checkAnswer(), 11)
	for _, s := range []*feedSub{web, api, db} {
		if woke, _, _, _ := look(t, s); woke {
			t.Errorf("an unchanged answer moved %s", s.service)
		}
	}
	readSub(api, 11, kept("n1", "api-1", "serfHealth=passing", "api:ttl=critical"))

	// At 12 api's check turns from critical to warning: less severe, so
	// both answers ask for a re-read (it may put api-1 back).
	apiWarn := apiTTL
	apiWarn.status, apiWarn.modify = "warning", 12
	f.onChecks(1, checkAnswer(checkKey{"n1", "api:ttl"}, apiWarn), 12)
	if woke, reread, _, _ := look(t, api); !woke || !reread {
		t.Errorf("api turning warning: woke %v reread %v, want a re-read", woke, reread)
	}
	f.onChecks(0, checkAnswer(checkKey{"n2", "serfHealth"}, serf2), 12)
	if woke, reread, _, _ := look(t, api); !woke || !reread {
		t.Errorf("api leaving critical: woke %v reread %v, want a re-read", woke, reread)
	}
	readSub(api, 12, kept("n1", "api-1", "serfHealth=passing", "api:ttl=warning"))

	// At 13 it turns critical again: worse, patched.
	apiCrit := apiTTL
	apiCrit.modify = 13
	f.onChecks(0, checkAnswer(checkKey{"n2", "serfHealth"}, serf2, checkKey{"n1", "api:ttl"}, apiCrit), 13)
	if woke, reread, _, admitted := look(t, api); !woke || reread || len(admitted) != 0 {
		t.Errorf("api failing again: woke %v reread %v admitted %v, want a patch", woke, reread, admitted)
	}
}

// TestFeedSubPatches: patches apply over the last read and only ever make
// a check worse; a read drops the ones it includes and keeps the later ones.
func TestFeedSubPatches(t *testing.T) {
	withPatches(t)
	s := &feedSub{service: "web", moved: make(chan struct{}, 1)}
	q := Query{Service: "web", Health: HealthPassing}
	if s.patch("n1", "web:ttl", "web:ttl", "web-1", "critical", 3) {
		t.Fatal("a patch before the first read was taken")
	}
	readSub(s, 5, kept("n1", "web-1", "serfHealth=passing", "web:ttl=passing"), kept("n2", "web-2", "serfHealth=passing", "web:ttl=passing"))
	switch {
	case s.patch("n1", "web:ttl", "other name", "web-1", "critical", 6):
		t.Error("a check under another name was patched")
	case s.patch("n1", "web:ttl", "web:ttl", "web-9", "critical", 6):
		t.Error("a check of another instance was patched")
	case !s.patch("n1", "web:ttl", "web:ttl", "web-1", "critical", 4):
		t.Error("a status the read has already was refused")
	}
	if _, ok := s.patched(q); ok {
		t.Error("a patch older than the read was applied")
	}
	s.patch("n1", "web:ttl", "web:ttl", "web-1", "warning", 6)
	s.patch("n1", "web:ttl", "web:ttl", "web-1", "critical", 7)
	s.patch("n2", "serfHealth", "serfHealth", "", "critical", 8)
	r, ok := s.patched(q)
	if !ok || len(r.ins) != 0 || len(r.excl) != 2 || !r.patched || r.at != 8 {
		t.Fatalf("patched: %+v %v, want both excluded at 8", r, ok)
	}
	if got := r.excl[0].Checks; !slices.Equal(got, []string{"web:ttl: critical"}) {
		t.Errorf("excluded checks %v", got)
	}
	for _, st := range []string{"passing", "warning"} {
		if s.patch("n1", "web:ttl", "web:ttl", "web-1", st, 9) {
			t.Errorf("critical → %s was patched in: it may put web-1 back, a re-read's to say", st)
		}
	}
	// A read at 7 includes the patches up to 7, not n2's at 8.
	got := readSub(s, 7, kept("n1", "web-1", "serfHealth=passing", "web:ttl=critical"), kept("n2", "web-2", "serfHealth=passing", "web:ttl=passing"))
	if len(got.ins) != 0 || len(got.excl) != 2 || len(s.patches) != 1 {
		t.Errorf("read at 7: %+v, patches %v; want web-2 still excluded by the patch at 8", got, s.patches)
	}
	if _, ok := s.patched(q); ok {
		t.Error("a read left patches to apply")
	}
}

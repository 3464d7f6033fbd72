package discovery

import (
	"cmp"
	"net/url"
	"slices"
	"testing"
	"time"
)

// newUnitFeed is a feed with no loops, for the diff logic alone.
func newUnitFeed() *feed {
	return &feed{subs: map[string]map[*feedSub]struct{}{}, advanced: make(chan struct{}), touched: map[uint64][]string{}}
}

// moved drains s's signal: whether it was moved, and the index promised.
func moved(s *feedSub) (bool, uint64) {
	select {
	case <-s.moved:
		s.mu.Lock()
		defer s.mu.Unlock()
		return true, s.want
	default:
		return false, 0
	}
}

func TestFeedChecksDiff(t *testing.T) {
	f := newUnitFeed()
	web, api, db := f.subscribe("web", nil), f.subscribe("api", nil), f.subscribe("db", nil)
	db.read(5, healthResult{ins: []Instance{{ID: "n2/db-1", Node: "n2", ServiceID: "db-1"}}})
	f.onChecks(0, map[checkKey]checkInfo{
		{"n1", "web:ttl"}: {service: "web", serviceID: "web-1", status: "critical", modify: 4},
	}, 5)
	for _, s := range []*feedSub{web, api, db} {
		if ok, _ := moved(s); ok {
			t.Fatalf("the baseline moved %s", s.service)
		}
	}
	// At 10: web's check passes again (leaves the answer), api gets a
	// failing check, n2's node check fails; output-only changes are no move.
	f.onChecks(0, map[checkKey]checkInfo{
		{"n1", "api:ttl"}:    {service: "api", serviceID: "api-1", status: "critical", modify: 10, create: 10},
		{"n2", "serfHealth"}: {status: "critical", name: "Serf Health Status", modify: 10},
	}, 10)
	if ok, want := moved(web); !ok || want != 0 {
		t.Errorf("web: moved %v want %d; a check that left promises no index", ok, want)
	}
	if ok, want := moved(api); !ok || want != 10 {
		t.Errorf("api: moved %v want %d, want moved at 10", ok, want)
	}
	if ok, want := moved(db); !ok || want != 10 {
		t.Errorf("db (an instance on n2): moved %v want %d, want moved at 10", ok, want)
	}
	if got := f.touched[10]; !slices.Contains(got, "api") || !slices.Contains(got, "web") {
		t.Errorf("touched[10] = %v, want api (written) and web (removed)", got)
	}
	// The same answer again: nothing moves.
	f.onChecks(0, map[checkKey]checkInfo{
		{"n1", "api:ttl"}:    {service: "api", serviceID: "api-1", status: "critical", modify: 10, create: 10},
		{"n2", "serfHealth"}: {status: "critical", name: "Serf Health Status", modify: 10},
	}, 11)
	for _, s := range []*feedSub{web, api, db} {
		if ok, _ := moved(s); ok {
			t.Errorf("an unchanged answer moved %s", s.service)
		}
	}
	// The warning query's first answer is its own baseline; then api's
	// check turns from critical to warning at 12: it leaves the critical
	// answer and enters the warning one, and either moves api.
	f.onChecks(1, map[checkKey]checkInfo{}, 11)
	if ok, _ := moved(api); ok {
		t.Errorf("the warning query's baseline moved api")
	}
	f.onChecks(1, map[checkKey]checkInfo{
		{"n1", "api:ttl"}: {service: "api", serviceID: "api-1", status: "warning", modify: 12, create: 10},
	}, 12)
	if ok, want := moved(api); !ok || want != 12 {
		t.Errorf("api turning warning: moved %v want %d, want moved at 12", ok, want)
	}
	f.onChecks(0, map[checkKey]checkInfo{
		{"n2", "serfHealth"}: {status: "critical", name: "Serf Health Status", modify: 10},
	}, 12)
	if ok, _ := moved(api); !ok {
		t.Errorf("api leaving the critical answer did not move it")
	}
	if got := f.touched[12]; !slices.Contains(got, "api") {
		t.Errorf("touched[12] = %v, want api", got)
	}
}

func TestSweepMoved(t *testing.T) {
	s := &feedSub{service: "web", tags: []string{"v1"}, moved: make(chan struct{}, 1)}
	s.read(20, healthResult{ins: []Instance{{ID: "n1/web-1", Node: "n1", ServiceID: "web-1"}}})
	nodes := map[string]uint64{"n1": 3}
	same := []sweepInstance{{node: "n1", id: "web-1", tags: []string{"v1"}, modify: 12},
		{node: "n1", id: "web-2", tags: []string{"v2"}, modify: 15}} // not the watch's tags
	for _, tc := range []struct {
		name  string
		seen  []sweepInstance
		nodes map[string]uint64
		want  bool
	}{
		{"unchanged", same, nodes, false},
		{"modified since", []sweepInstance{{node: "n1", id: "web-1", tags: []string{"v1"}, modify: 21}}, nodes, true},
		{"gone", nil, nodes, true},
		{"unknown instance with its tags", append(slices.Clone(same), sweepInstance{node: "n3", id: "web-3", tags: []string{"v1"}, modify: 2}), nodes, true},
		{"node modified since", same, map[string]uint64{"n1": 25}, true},
	} {
		if got := s.sweepMoved(tc.seen, tc.nodes); got != tc.want {
			t.Errorf("%s: moved %v, want %v", tc.name, got, tc.want)
		}
	}
	fresh := &feedSub{service: "web"}
	if fresh.sweepMoved(nil, nil) {
		t.Error("a watch before its first read was moved")
	}
}

// TestQueryKeyFastPath: the plain query's key, built without url.Values,
// is what url.Values would build.
func TestQueryKeyFastPath(t *testing.T) {
	for _, name := range []string{"web", "a b", "ü/x?y&z=1", "%2F", ""} {
		for _, health := range []string{"", HealthPassing, HealthWarning} {
			v := url.Values{}
			v.Set("health", cmp.Or(health, HealthPassing))
			want := url.PathEscape(name) + "?" + v.Encode()
			if got := (Query{Service: name, Health: health}).Key(); got != want {
				t.Errorf("Key(%q, %q) = %q, want %q", name, health, got, want)
			}
		}
	}
}

// TestSweepSpacing: sweeps are spaced by their cost (sweepRate requests a
// second on average), never closer than sweepMinSpacing.
func TestSweepSpacing(t *testing.T) {
	for _, c := range []struct {
		requests int
		want     time.Duration
	}{{0, 100 * time.Millisecond}, {2, 100 * time.Millisecond}, {21, 105 * time.Millisecond},
		{101, 505 * time.Millisecond}, {2001, 10005 * time.Millisecond}} {
		if got := sweepSpacing(c.requests); got != c.want {
			t.Errorf("sweepSpacing(%d) = %s, want %s", c.requests, got, c.want)
		}
	}
}

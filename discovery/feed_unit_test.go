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

func TestSweepMoved(t *testing.T) {
	s := &feedSub{service: "web", tags: []string{"v1"}, moved: make(chan struct{}, 1)}
	readSub(s, 20, kept("n1", "web-1"))
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

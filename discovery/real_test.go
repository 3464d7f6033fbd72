package discovery

// Tests against a real Consul dev agent (test/consultest). Every behaviour a
// real agent can show is tested here; double_test.go covers the rest.

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// newTestClient returns a Client for addr with fast retries and a generous
// rate so tests with many transitions stay quick; mod adjusts the config.
func newTestClient(t testing.TB, addr string, mod ...func(*Config)) *Client {
	t.Helper()
	cfg := Config{
		Address:    addr,
		Logger:     hclogTest(t),
		MinBackoff: 50 * time.Millisecond,
		MaxBackoff: time.Second,
		Rate:       50,
		Burst:      10,
	}
	for _, m := range mod {
		m(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestWatchAddRemoveInstances(t *testing.T) { bothModes(t, testWatchAddRemoveInstances) }

func testWatchAddRemoveInstances(t *testing.T, mode func(*Config)) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr(), mode)
	w := startWatch(t, c, Query{Service: "web"})

	first := w.rec.waitIDs(t) // unknown service: an empty first snapshot
	if first.Index == 0 || first.Query.Health != HealthPassing || first.Time.IsZero() {
		t.Fatalf("first snapshot %+v: want index > 0, health passing, time set", first)
	}
	a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 8080, []string{"v1"}, map[string]string{"zone": "a"})
	a.RegisterTTL(t, "web-b", "web", "", 8081, nil, nil)
	s := w.rec.waitIDs(t, "web-a", "web-b")
	want := []Instance{
		{ID: a.Node() + "/web-a", Node: a.Node(), ServiceID: "web-a", Address: "10.0.0.1", Port: 8080,
			Tags: []string{"v1"}, Meta: map[string]string{"zone": "a"}, Weight: 1},
		{ID: a.Node() + "/web-b", Node: a.Node(), ServiceID: "web-b", Address: "127.0.0.1", Port: 8081, Weight: 1},
	}
	if !sameInstances(s.Instances, want) {
		t.Fatalf("instances\n got %+v\nwant %+v", s.Instances, want)
	}
	if s.Index <= first.Index {
		t.Fatalf("index %d not above the first snapshot's %d", s.Index, first.Index)
	}

	a.Deregister(t, "web-b")
	s = w.rec.waitIDs(t, "web-a")

	st := c.Status()
	if len(st) != 1 || !st[0].Synced || st[0].LastError != "" || st[0].Instances != 1 ||
		st[0].LastIndex < s.Index || st[0].LastSuccess.IsZero() || st[0].Query.Service != "web" {
		t.Fatalf("status %+v", st)
	}
	for i, s := range w.rec.all()[1:] {
		if len(s.Instances) == 0 {
			t.Fatalf("snapshot %d is empty although web-a was registered throughout", i+1)
		}
	}
	w.stop(t)
	if st := c.Status(); len(st) != 0 {
		t.Fatalf("status lists %d watches after Watch returned", len(st))
	}
}

func TestWatchHealthTransitions(t *testing.T) { bothModes(t, testWatchHealthTransitions) }

func testWatchHealthTransitions(t *testing.T, mode func(*Config)) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr(), mode)
	checkA := a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, nil, nil)
	checkB := a.RegisterTTL(t, "web-b", "web", "10.0.0.2", 80, nil, nil)
	w := startWatch(t, c, Query{Service: "web"})
	w.rec.waitIDs(t, "web-a", "web-b")

	a.SetCheck(t, checkB, api.HealthCritical)
	w.rec.waitIDs(t, "web-a")
	a.SetCheck(t, checkB, api.HealthPassing)
	w.rec.waitIDs(t, "web-a", "web-b")

	a.Maintenance(t, "web-a", true) // service maintenance
	w.rec.waitIDs(t, "web-b")
	a.Maintenance(t, "web-a", false)
	w.rec.waitIDs(t, "web-a", "web-b")

	a.NodeMaintenance(t, true) // node maintenance: every instance on the node
	w.rec.waitIDs(t)
	a.NodeMaintenance(t, false)
	w.rec.waitIDs(t, "web-a", "web-b")

	a.RegisterCheck(t, api.AgentCheckRegistration{ID: "disk", Name: "disk", // node check
		AgentServiceCheck: api.AgentServiceCheck{TTL: "10m", Status: api.HealthWarning}})
	w.rec.waitIDs(t) // a warning node check excludes all under "passing"
	a.DeregisterCheck(t, "disk")
	w.rec.waitIDs(t, "web-a", "web-b")

	a.SetCheck(t, checkA, api.HealthWarning)
	w.rec.waitIDs(t, "web-b")
}

// TestB04OnlyHealthyInstances: A passing; B service check critical; C node
// check (serfHealth) critical; D in maintenance; E warning; F passing on a
// second node (node checks are per node).
func TestB04OnlyHealthyInstances(t *testing.T) { bothModes(t, testB04OnlyHealthyInstances) }

func testB04OnlyHealthyInstances(t *testing.T, mode func(*Config)) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr(), mode)
	a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, nil, nil)
	checkB := a.RegisterTTL(t, "web-b", "web", "10.0.0.2", 80, nil, nil)
	a.SetCheck(t, checkB, api.HealthCritical)
	a.RegisterTTL(t, "web-d", "web", "10.0.0.4", 80, nil, nil)
	a.Maintenance(t, "web-d", true)
	a.Register(t, api.AgentServiceRegistration{ID: "web-e", Name: "web", Address: "10.0.0.5", Port: 80,
		Weights: &api.AgentWeights{Passing: 10, Warning: 3},
		Check:   &api.AgentServiceCheck{CheckID: "web-e:ttl", TTL: "10m", Status: api.HealthWarning}})
	external := func(node, id, serf string) {
		a.RegisterExternal(t, api.CatalogRegistration{Node: node, Address: "10.1.0.1",
			Service: &api.AgentService{ID: id, Service: "web", Port: 80},
			Checks: api.HealthChecks{
				{Node: node, CheckID: "serfHealth", Name: "Serf Health Status", Status: serf},
				{Node: node, CheckID: id + ":http", Name: "http", Status: api.HealthPassing, ServiceID: id},
			}})
	}
	external("node-c", "web-c", api.HealthCritical)
	external("node-f", "web-f", api.HealthPassing)

	passing := startWatch(t, c, Query{Service: "web"})
	warning := startWatch(t, c, Query{Service: "web", Health: HealthWarning})
	passing.rec.waitIDs(t, "web-a", "web-f")
	s := warning.rec.waitIDs(t, "web-a", "web-e", "web-f")
	if w := s.Instances[1].Weight; w != 3 {
		t.Fatalf("warning instance weight %d, want Weights.Warning 3", w)
	}
	if w := s.Instances[0].Weight; w != 1 {
		t.Fatalf("default weight %d, want 1", w)
	}
	for _, r := range []*recorder{passing.rec, warning.rec} {
		for _, s := range r.all() {
			for _, id := range instanceIDs(s) {
				if slices.Contains([]string{"web-b", "web-c", "web-d"}, id) {
					t.Fatalf("unhealthy %s admitted in %v", id, instanceIDs(s))
				}
			}
		}
	}
}

func TestWatchTagFilter(t *testing.T) { bothModes(t, testWatchTagFilter) }

func testWatchTagFilter(t *testing.T, mode func(*Config)) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr(), mode)
	a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, []string{"v1", "blue"}, nil)
	a.RegisterTTL(t, "web-b", "web", "10.0.0.2", 80, []string{"v1"}, nil)
	a.RegisterTTL(t, "web-c", "web", "10.0.0.3", 80, []string{"extra", "blue", "v1"}, nil)
	w := startWatch(t, c, Query{Service: "web", Tags: []string{"v1", "blue"}})
	w.rec.waitIDs(t, "web-a", "web-c")
	a.RegisterTTL(t, "web-b", "web", "10.0.0.2", 80, []string{"blue", "v1"}, nil)
	w.rec.waitIDs(t, "web-a", "web-b", "web-c")
}

// TestWatchEmitsOnContentChangeOnly: a new index with the same content does
// not emit; a change of any single field does.
func TestWatchEmitsOnContentChangeOnly(t *testing.T) { bothModes(t, testWatchEmitsOnContentChangeOnly) }

func testWatchEmitsOnContentChangeOnly(t *testing.T, mode func(*Config)) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr(), mode)
	check := a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, []string{"v1"}, map[string]string{"rev": "1"})
	w := startWatch(t, c, Query{Service: "web", Health: HealthWarning})
	s := w.rec.waitIDs(t, "web-a")
	n := w.rec.count()

	// Passing → warning: the index moves, the admitted set (weight 1 either
	// way) does not.
	a.SetCheck(t, check, api.HealthWarning)
	waitFor(t, "the watch to see a newer index", func() bool {
		st := c.Status()
		return len(st) == 1 && st[0].LastIndex > s.Index
	})
	if got := w.rec.count(); got != n {
		t.Fatalf("emitted %d snapshots for an index-only change", got-n)
	}

	steps := []struct {
		name  string
		apply func()
		check func(Instance) bool
	}{
		{"meta", func() {
			a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, []string{"v1"}, map[string]string{"rev": "2"})
		},
			func(in Instance) bool { return in.Meta["rev"] == "2" }},
		{"port", func() {
			a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 81, []string{"v1"}, map[string]string{"rev": "2"})
		},
			func(in Instance) bool { return in.Port == 81 }},
		{"tags", func() {
			a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 81, []string{"v2"}, map[string]string{"rev": "2"})
		},
			func(in Instance) bool { return slices.Equal(in.Tags, []string{"v2"}) }},
		{"address", func() {
			a.RegisterTTL(t, "web-a", "web", "10.0.0.9", 81, []string{"v2"}, map[string]string{"rev": "2"})
		},
			func(in Instance) bool { return in.Address == "10.0.0.9" }},
		{"weight", func() {
			a.Register(t, api.AgentServiceRegistration{ID: "web-a", Name: "web", Address: "10.0.0.9", Port: 81,
				Tags: []string{"v2"}, Meta: map[string]string{"rev": "2"}, Weights: &api.AgentWeights{Passing: 5, Warning: 2},
				Check: &api.AgentServiceCheck{CheckID: check, TTL: "10m", Status: api.HealthPassing}})
		}, func(in Instance) bool { return in.Weight == 2 }}, // the check is still warning: re-registration keeps its status
		{"warning→passing weight", func() { a.SetCheck(t, check, api.HealthPassing) },
			func(in Instance) bool { return in.Weight == 5 }},
	}
	for _, step := range steps {
		before := w.rec.count()
		step.apply()
		waitFor(t, step.name+" change to be emitted", func() bool {
			s, ok := w.rec.last()
			return ok && len(s.Instances) == 1 && step.check(s.Instances[0])
		})
		if got := w.rec.count(); got != before+1 {
			t.Fatalf("%s change: %d snapshots emitted, want 1", step.name, got-before)
		}
	}
}

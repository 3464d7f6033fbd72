package discovery

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

func TestPrefixedServices(t *testing.T) {
	got := prefixedServices(map[string][]string{
		"consul": nil,
		"shop":   {"v1", "impulse.route=/shop", "impulse.route=/shop", "impulse.scheme=http"},
		"other":  {"v2", "impulsive", "impulse"},
		"meta":   {"impulse.enable=true"},
		"edge":   {"edge.route=/x"},
	}, "impulse")
	want := map[string][]string{
		"shop": {"impulse.route=/shop", "impulse.scheme=http"},
		"meta": {"impulse.enable=true"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("prefixedServices = %v, want %v", got, want)
	}
}

func TestCatalogQueryNormalize(t *testing.T) {
	if _, err := (CatalogQuery{}).normalize(); err == nil {
		t.Fatal("empty tag prefix accepted")
	}
	q, err := CatalogQuery{TagPrefix: "impulse."}.normalize()
	if err != nil || q.TagPrefix != "impulse" {
		t.Fatalf("normalize = %+v, %v", q, err)
	}
	c := newTestClient(t, "127.0.0.1:1")
	if err := c.WatchCatalog(t.Context(), CatalogQuery{TagPrefix: "x"}, nil); err == nil {
		t.Fatal("nil emit accepted")
	}
}

// catalogRecorder collects the snapshots of a catalog watch.
type catalogRecorder struct{ collector[CatalogSnapshot] }

// wait waits until the latest snapshot equals want and returns it.
func (r *catalogRecorder) wait(t *testing.T, want map[string][]string) CatalogSnapshot {
	t.Helper()
	var last CatalogSnapshot
	waitFor(t, fmt.Sprintf("catalog %v (have %v)", want, lazyCatalog{r}), func() bool {
		s := r.all()
		if len(s) == 0 {
			return false
		}
		last = s[len(s)-1]
		return maps.EqualFunc(last.Services, want, slices.Equal[[]string])
	})
	return last
}

type lazyCatalog struct{ r *catalogRecorder }

func (l lazyCatalog) String() string {
	s := l.r.all()
	if len(s) == 0 {
		return "nothing"
	}
	return fmt.Sprint(s[len(s)-1].Services)
}

// startCatalogWatch runs c.WatchCatalog(q) until the test ends.
func startCatalogWatch(t *testing.T, c *Client, q CatalogQuery) *catalogRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &catalogRecorder{}
	done := make(chan error, 1)
	go func() { done <- c.WatchCatalog(ctx, q, r.emit) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("WatchCatalog returned %v, want context.Canceled", err)
			}
		case <-time.After(2 * time.Second):
			t.Error("WatchCatalog did not return within 2s of cancel")
		}
	})
	return r
}

// TestWatchCatalogOptInAndFilter against a real agent: a service appears when
// it gains a prefixed tag and disappears when it loses it or is
// deregistered; changes of other tags emit nothing; the filter expression is
// evaluated by Consul.
func TestWatchCatalogOptInAndFilter(t *testing.T) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr())
	all := startCatalogWatch(t, c, CatalogQuery{TagPrefix: "impulse"})
	teamA := startCatalogWatch(t, c, CatalogQuery{TagPrefix: "impulse", Filter: `ServiceMeta.team == "a"`})

	first := all.wait(t, map[string][]string{}) // only "consul", without tags
	if first.Index == 0 || first.Time.IsZero() || first.Query.TagPrefix != "impulse" {
		t.Fatalf("first snapshot %+v", first)
	}
	teamA.wait(t, map[string][]string{})

	a.RegisterTTL(t, "shop-1", "shop", "10.0.0.1", 80, []string{"v1", "impulse.route=/shop"}, map[string]string{"team": "a"})
	a.RegisterTTL(t, "plain-1", "plain", "10.0.0.2", 80, []string{"v1"}, map[string]string{"team": "a"})
	a.RegisterTTL(t, "meta-1", "meta", "10.0.0.3", 80, []string{"impulse.enable=true"}, map[string]string{"team": "b", "impulse-route": "/meta"})
	all.wait(t, map[string][]string{"shop": {"impulse.route=/shop"}, "meta": {"impulse.enable=true"}})
	teamA.wait(t, map[string][]string{"shop": {"impulse.route=/shop"}})

	// A second instance adds a tag: the service's tags are the union.
	a.RegisterTTL(t, "shop-2", "shop", "10.0.0.4", 80, []string{"impulse.route=api.example.com/"}, map[string]string{"team": "a"})
	all.wait(t, map[string][]string{"shop": {"impulse.route=/shop", "impulse.route=api.example.com/"}, "meta": {"impulse.enable=true"}})

	// Only another tag changes: the index moves, nothing is emitted.
	n := len(all.all())
	idx := c.Status()[0].LastIndex
	a.RegisterTTL(t, "shop-1", "shop", "10.0.0.1", 80, []string{"v2", "impulse.route=/shop"}, map[string]string{"team": "a"})
	waitFor(t, "the catalog watches to see a newer index", func() bool {
		for _, st := range c.Status() {
			if st.Catalog == nil || st.LastIndex <= idx {
				return false
			}
		}
		return true
	})
	if got := len(all.all()); got != n {
		t.Fatalf("%d snapshots emitted for a change of an unrelated tag", got-n)
	}

	// Losing the prefixed tag, then deregistering, removes the service.
	a.RegisterTTL(t, "shop-2", "shop", "10.0.0.4", 80, nil, map[string]string{"team": "a"})
	a.RegisterTTL(t, "shop-1", "shop", "10.0.0.1", 80, []string{"v2"}, map[string]string{"team": "a"})
	all.wait(t, map[string][]string{"meta": {"impulse.enable=true"}})
	teamA.wait(t, map[string][]string{})
	a.Deregister(t, "meta-1")
	all.wait(t, map[string][]string{})

	st := c.Status()
	if len(st) != 2 || st[0].Catalog == nil || st[1].Catalog == nil || !st[0].Synced || st[0].LastError != "" {
		t.Fatalf("status %+v", st)
	}
	for _, s := range all.all() {
		if _, ok := s.Services["plain"]; ok {
			t.Fatalf("a service without a prefixed tag was reported: %v", s.Services)
		}
	}
}

// catalogErrors is the query.errors counter of the catalog watch, by reason.
const catalogErrors = "impulse.discovery.query.errors;service=" + CatalogEndpoint + ";reason="

// TestWatchCatalogBadFilter: Consul rejects the expression (500 from Consul
// 1.14, 400 from later versions); the watch reports it and never emits.
func TestWatchCatalogBadFilter(t *testing.T) {
	t.Parallel()
	a := consultest.Start(t)
	m, sink := newMetrics(t)
	c := newTestClient(t, a.Addr(), func(cfg *Config) { cfg.Metrics = m })
	r := startCatalogWatch(t, c, CatalogQuery{TagPrefix: "impulse", Filter: `ServiceMeta.team ==`})
	waitFor(t, "a rejected filter", func() bool {
		return sink.counter(catalogErrors+"http_400")+sink.counter(catalogErrors+"http_500") >= 2
	})
	st := c.Status()
	if len(st) != 1 || st[0].Synced || !strings.Contains(st[0].LastError, "GET /v1/catalog/services: status ") ||
		!strings.Contains(st[0].LastError, "boolean expression") {
		t.Fatalf("status %+v", st)
	}
	if n := len(r.all()); n != 0 {
		t.Fatalf("%d snapshots emitted", n)
	}
}

// TestWatchCatalogACLFiltered: a token that may read no service gets an
// empty list flagged as filtered; that is an error, not "no services".
func TestWatchCatalogACLFiltered(t *testing.T) {
	t.Parallel()
	const mgmt = "2f6d1c0e-7a3b-4c5d-8e9f-0a1b2c3d4e5f"
	a := consultest.Start(t, consultest.WithACLs(mgmt))
	tok := a.CreateToken(t, "nodes-only", `node_prefix "" { policy = "read" }`)
	a.RegisterTTL(t, "shop-1", "shop", "10.0.0.1", 80, []string{"impulse.route=/shop"}, nil)
	m, sink := newMetrics(t)
	c := newTestClient(t, a.Addr(), func(cfg *Config) { cfg.Token, cfg.Metrics = tok, m })
	r := startCatalogWatch(t, c, CatalogQuery{TagPrefix: "impulse"})
	waitFor(t, "an acl_filtered error", func() bool { return sink.counter(catalogErrors+reasonACLFiltered) >= 1 })
	if n := len(r.all()); n != 0 {
		t.Fatalf("denied catalog watch emitted %d snapshots", n)
	}
}

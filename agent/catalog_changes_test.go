package agent

import (
	"fmt"
	"maps"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// TestPublishCatalogLogsNewOnly: a conflict is logged when it first
// appears in a report, not again while it stays; one that differs in any
// field (methods included, nil apart from empty) is new.
func TestPublishCatalogLogsNewOnly(t *testing.T) {
	logs := &syncBuffer{}
	a := &Agent{log: hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: logs})}
	a.catalog.Store(&catalogReport{})
	shop := routeConflict{PathPrefix: "/shop", Winner: "web", WinnerSource: SourceHCL, Loser: "consul:shop", LoserSource: "consul:shop", Rule: RuleHCLWins}
	cart := shop
	cart.PathPrefix = "/cart"
	withMethods, emptyMethods := shop, shop
	withMethods.Methods, emptyMethods.Methods = []string{"GET"}, []string{}
	count := func() int { return strings.Count(logs.String(), "route declared in Consul skipped") }
	for i, step := range []struct {
		conflicts []routeConflict
		logged    int // in total so far
	}{
		{[]routeConflict{shop}, 1},
		{[]routeConflict{shop}, 1},
		{[]routeConflict{cart, shop}, 2},
		{[]routeConflict{shop, withMethods, emptyMethods}, 4},
		{[]routeConflict{emptyMethods, withMethods}, 4},
		{[]routeConflict{shop}, 5}, // gone in the previous report: new again
	} {
		a.publishCatalog(catalogReport{Conflicts: step.conflicts})
		if got := count(); got != step.logged {
			t.Fatalf("step %d: %d conflicts logged, want %d\n%s", i, got, step.logged, logs)
		}
	}
}

// TestCatalogChangesAgainstConsul: with a real Consul, a catalog change
// that leaves every catalog upstream's consul block as it was (a route tag
// added) is served without discovery being applied again, and what
// follows it still is: new instances of that service reach its upstream,
// and a service that appears afterwards gets its watch and backends.
func TestCatalogChangesAgainstConsul(t *testing.T) {
	consul := consultest.Start(t)
	b1, b2 := backend(t, "b1"), backend(t, "b2")
	hostPort := func(s *httptest.Server) (string, int) {
		u, _ := url.Parse(s.URL)
		p, _ := strconv.Atoi(u.Port())
		return u.Hostname(), p
	}
	register := func(id, service string, b *httptest.Server, routes ...string) {
		var tags []string
		for _, r := range routes {
			tags = append(tags, "impulse.route="+r)
		}
		h, p := hostPort(b)
		consul.RegisterTTL(t, id, service, h, p, tags, nil)
	}
	register("shop-1", "shop", b1, "/shop")
	r := start(t, baseConfig+fmt.Sprintf(`
consul {
  address = %q
  wait    = "5s"
  catalog {
    tag_prefix = "impulse"
  }
}
`, consul.Addr()))
	// answers returns the bodies of n GETs of path (status:body).
	answers := func(path string, n int) map[string]bool {
		got := map[string]bool{}
		for range n {
			code, body := r.get(t, r.url("main", path))
			got[fmt.Sprintf("%d:%s", code, body)] = true
		}
		return got
	}
	waitFor := func(what, path string, want ...string) {
		t.Helper()
		w := map[string]bool{}
		for _, s := range want {
			w[s] = true
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := answers(path, 4)
			if maps.Equal(got, w) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s answers %v, want %v", what, path, got, w)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("the catalog route", "/shop", "200:b1")

	r.a.mu.Lock()
	applied := r.a.discTargets
	r.a.mu.Unlock()
	register("shop-1", "shop", b1, "/shop", "/shop2")
	waitFor("a route tag added", "/shop2", "200:b1")
	r.a.mu.Lock()
	skipped := r.a.discTargets.cfg == applied.cfg && len(r.a.discTargets.synth) == 1 && len(applied.synth) == 1 &&
		r.a.discTargets.synth[0].Consul == applied.synth[0].Consul
	r.a.mu.Unlock()
	if !skipped {
		t.Error("discovery was applied again for a route tag")
	}

	register("shop-2", "shop", b2, "/shop", "/shop2")
	consul.Deregister(t, "shop-1")
	waitFor("instances changed after the route change", "/shop2", "200:b2")

	register("cart-1", "cart", b1, "/cart")
	waitFor("a service that appears next", "/cart", "200:b1")
	waitFor("the other service meanwhile", "/shop", "200:b2")
}

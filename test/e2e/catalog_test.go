package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// catalogHCL is a consul block in the catalog mode (instances reached over
// HTTPS unless a tag or ServiceMeta says http) plus one upstream block
// "hcl-taken" routing /taken to be.
func catalogHCL(consulAddr string, be *backend) string {
	return fmt.Sprintf(`
consul {
  address = %q
  wait    = "5s"
  catalog {
    tag_prefix     = "impulse"
    default_scheme = "https"
  }
}
`, consulAddr) + staticUpstreamHCL("hcl-taken", "/taken", "", be)
}

// routeJSON is one element of /v1/routes.
type routeJSON struct {
	Upstream   string `json:"upstream"`
	Host       string `json:"host"`
	PathPrefix string `json:"path_prefix"`
	Source     string `json:"source"`
	Conflicts  []struct {
		Upstream string `json:"upstream"`
		Source   string `json:"source"`
		Rule     string `json:"rule"`
	} `json:"conflicts"`
}

func (a *agentProc) routeList() []routeJSON {
	a.t.Helper()
	code, b := a.control("GET", "/v1/routes", nil)
	if code != http.StatusOK {
		a.t.Fatalf("/v1/routes: %d %s", code, b)
	}
	var out []routeJSON
	if err := json.Unmarshal(b, &out); err != nil {
		a.t.Fatalf("/v1/routes: %v in %s", err, b)
	}
	return out
}

// routeFor returns the /v1/routes entry for path_prefix p (any host).
func (a *agentProc) routeFor(p string) (routeJSON, bool) {
	for _, r := range a.routeList() {
		if r.Host == "" && r.PathPrefix == p {
			return r, true
		}
	}
	return routeJSON{}, false
}

// TestCatalogRoutes: with consul.catalog, services declare their routes in
// Consul. A tag impulse.route=/shop (and impulse.scheme=http) routes /shop
// to the service without any upstream block; an instance with ServiceMeta
// impulse-route=/meta and impulse-scheme=http does the same from its
// metadata; a route also declared by an upstream block is served by the
// block and /v1/routes reports the conflict with both sources, also after a
// reload adds a block for /shop; deregistering a service removes its route
// (404); and while Consul is down the last known routes keep serving.
func TestCatalogRoutes(t *testing.T) {
	c := consultest.Start(t)
	shop := newHTTP1Backend(t, "shop-1")
	meta := newHTTP1Backend(t, "meta-1")
	keep := newHTTP1Backend(t, "keep-1")
	block := newHTTP1Backend(t, "hcl-1")
	cfg := baseHCL() + catalogHCL(c.Addr(), block)
	a := startAgent(t, cfg)
	client, _ := newH3Client(t)
	waitFor(t, 10*time.Second, "/v1/ready 200 (the catalog answered)", func() bool {
		code, _ := a.readyStatus()
		return code == http.StatusOK
	})
	if r := mustGet(t, client, a.URL("/shop")); r.Status != http.StatusNotFound {
		t.Fatalf("GET /shop before any registration: %d", r.Status)
	}

	c.RegisterTTL(t, "shop-1", "shop", shop.Host, shop.Port, []string{"impulse.route=/shop", "impulse.route=/taken", "impulse.scheme=http", "v1"}, nil)
	c.RegisterTTL(t, "meta-1", "metasvc", meta.Host, meta.Port, []string{"impulse.enable=true"},
		map[string]string{"impulse-route": "/meta", "impulse-scheme": "http"})
	c.RegisterTTL(t, "keep-1", "keep", keep.Host, keep.Port, []string{"impulse.route=/keep"}, map[string]string{"impulse-scheme": "http"})
	expect := func(path string, status int, body string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			r, err := get(client, a.URL(path))
			if err == nil && r.Status == status && (body == "" || r.Body == body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: want %d %q; last answer %d %q x-impulse-error=%q (error %v)",
					path, status, body, r.Status, r.Body, r.Header.Get("X-Impulse-Error"), err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	expect("/shop/cart", 200, "hello from shop-1\n")
	expect("/meta", 200, "hello from meta-1\n")
	expect("/keep", 200, "hello from keep-1\n")
	expect("/taken", 200, "hello from hcl-1\n") // the upstream block wins

	checkRoute := func(path, upstream, source string, conflicts ...string) {
		t.Helper()
		r, ok := a.routeFor(path)
		if !ok {
			t.Fatalf("/v1/routes has no route for %s: %+v", path, a.routeList())
		}
		var got []string
		for _, c := range r.Conflicts {
			got = append(got, c.Source+" "+c.Rule)
			if c.Upstream != c.Source {
				t.Errorf("conflict on %s: upstream %q, source %q", path, c.Upstream, c.Source)
			}
		}
		if r.Upstream != upstream || r.Source != source || !slices.Equal(got, conflicts) {
			t.Fatalf("/v1/routes %s: upstream %q source %q conflicts %q; want %q %q %q", path, r.Upstream, r.Source, got, upstream, source, conflicts)
		}
	}
	checkRoute("/shop", "consul:shop", "consul:shop")
	checkRoute("/meta", "consul:metasvc", "consul:metasvc")
	checkRoute("/taken", "hcl-taken", "hcl", "consul:shop hcl_wins")
	if code, r := a.readyStatus(); code != http.StatusOK || r.Status != "ok" {
		t.Fatalf("/v1/ready: %d %+v", code, r)
	}
	if a.waitLog(5*time.Second, "route declared in Consul skipped: the same route is declared elsewhere", func(e map[string]any) bool {
		return e["path_prefix"] == "/taken" && e["served_by"] == "hcl" && e["skipped"] == "consul:shop" && e["rule"] == "hcl_wins"
	}) == nil {
		t.Fatal("no conflict log line")
	}

	// A reload adds an upstream block for /shop: it takes the route over.
	cfg2 := cfg + staticUpstreamHCL("hcl-shop", "/shop", "", block)
	if err := os.WriteFile(a.ConfigPath, []byte(cfg2), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := a.control("POST", "/v1/reload", nil); code != http.StatusOK {
		t.Fatalf("POST /v1/reload: %d %s", code, body)
	}
	expect("/shop/cart", 200, "hello from hcl-1\n")
	checkRoute("/shop", "hcl-shop", "hcl", "consul:shop hcl_wins")
	expect("/meta", 200, "hello from meta-1\n")

	// Deregistering a service removes its upstream and route.
	c.Deregister(t, "meta-1")
	expect("/meta", 404, "")
	if r := mustGet(t, client, a.URL("/meta")); r.Header.Get("X-Impulse-Error") != "no_route" {
		t.Fatalf("GET /meta after deregistration: x-impulse-error %q", r.Header.Get("X-Impulse-Error"))
	}
	waitFor(t, 5*time.Second, "consul:metasvc to leave /v1/upstreams", func() bool {
		_, b := a.control("GET", "/v1/upstreams", nil)
		return !strings.Contains(string(b), "consul:metasvc")
	})
	// Losing the last route declaration leaves the conflicts too.
	c.Deregister(t, "shop-1")
	waitFor(t, 5*time.Second, "the /shop conflict to disappear", func() bool {
		r, ok := a.routeFor("/shop")
		return ok && len(r.Conflicts) == 0
	})
	expect("/shop", 200, "hello from hcl-1\n")

	// Consul down: catalog errors never remove upstreams.
	c.Stop()
	a.waitLog(15*time.Second, "consul query failed; keeping the last known services", nil)
	for i := 0; i < 10; i++ {
		if r := mustGet(t, client, a.URL("/keep")); r.Status != 200 || r.Body != "hello from keep-1\n" {
			t.Fatalf("GET /keep while Consul is down: %d %q", r.Status, r.Body)
		}
	}
	if _, ok := a.routeFor("/keep"); !ok {
		t.Fatal("/v1/routes lost /keep while Consul is down")
	}
	a.Stop()
}

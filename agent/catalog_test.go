package agent

import (
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/hcl"
)

func meta(id string, kv ...string) discovery.Instance {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return discovery.Instance{ID: id, Meta: m}
}

func routes(specs ...string) []hcl.Route {
	var out []hcl.Route
	for _, s := range specs {
		r, err := hcl.ParseCatalogRoute(s)
		if err != nil {
			panic(err)
		}
		out = append(out, r)
	}
	return out
}

func TestDeclaration(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tags      []string
		instances []discovery.Instance
		want      serviceDecl // problems compared by fragments below
		problems  []string
	}{
		{name: "route tag", tags: []string{"impulse.route=/shop"},
			want: serviceDecl{optedIn: true, routes: routes("/shop"), scheme: "http", lb: "round_robin"}},
		{name: "several route tags, sorted and deduplicated",
			tags: []string{"impulse.route=/b", "impulse.route=API.example.com/", "impulse.route=/a", "impulse.route= /b"},
			want: serviceDecl{optedIn: true, routes: routes("/a", "/b", "api.example.com/"), scheme: "http", lb: "round_robin"}},
		{name: "no opt-in", tags: []string{"impulse.scheme=https", "impulse.lb=random"},
			instances: []discovery.Instance{meta("n/1", MetaRoute, "/x")}},
		{name: "enable=false wins over route tags", tags: []string{"impulse.enable=false", "impulse.enable=true", "impulse.route=/shop"}},
		{name: "enable with ServiceMeta routes",
			tags: []string{"impulse.enable=true"},
			instances: []discovery.Instance{
				meta("n/1", MetaRoute, "/meta, shop.example.com/cart"),
				meta("n/2", MetaRoute, "/meta"),
				meta("n/3"),
			},
			want: serviceDecl{optedIn: true, routes: routes("/meta", "shop.example.com/cart"), scheme: "http", lb: "round_robin"}},
		{name: "tag and meta declare the same route", tags: []string{"impulse.route=/x"},
			instances: []discovery.Instance{meta("n/1", MetaRoute, "/x,/y")},
			want:      serviceDecl{optedIn: true, routes: routes("/x", "/y"), scheme: "http", lb: "round_robin"}},
		{name: "scheme and lb tags", tags: []string{"impulse.enable=1", "impulse.scheme=https", "impulse.lb=least_request"},
			want: serviceDecl{optedIn: true, scheme: "https", lb: "least_request"}},
		{name: "h2c scheme tag", tags: []string{"impulse.enable=1", "impulse.scheme=h2c"},
			want: serviceDecl{optedIn: true, scheme: "h2c", lb: "round_robin"}},
		{name: "ServiceMeta impulse-lb wins over the tag", tags: []string{"impulse.route=/", "impulse.lb=random"},
			instances: []discovery.Instance{meta("n/1", MetaLB, "ewma"), meta("n/2", MetaLB, "ewma")},
			want:      serviceDecl{optedIn: true, routes: routes("/"), scheme: "http", lb: "ewma"}},
		{name: "instances disagree on impulse-lb: smallest ID", tags: []string{"impulse.route=/"},
			instances: []discovery.Instance{meta("n/1", MetaLB, "random"), meta("n/2", MetaLB, "least_request")},
			want:      serviceDecl{optedIn: true, routes: routes("/"), scheme: "http", lb: "random"},
			problems:  []string{"impulse-lb differs between instances; using \"random\""}},
		{name: "bad values are reported, not fatal",
			tags: []string{"impulse.route=example.com:80/x", "impulse.route=/ok", "impulse.enable=perhaps", "impulse.scheme=h3",
				"impulse.lb=consistent_hash", "impulse.lb=fastest", "impulse.colour=blue", "impulse.route"},
			instances: []discovery.Instance{meta("n/1", MetaRoute, "/fine,/a b,", MetaLB, "consistent_hash")},
			want:      serviceDecl{optedIn: true, routes: routes("/fine", "/ok"), scheme: "http", lb: "round_robin"},
			problems: []string{
				`tag "impulse.route=example.com:80/x": "example.com:80" must not include a port`,
				`tag "impulse.enable=perhaps": not a boolean`,
				`tag impulse.scheme=h3: must be http, https or h2c`,
				`tag impulse.lb=consistent_hash: consistent_hash needs hash_on`,
				`tag impulse.lb=fastest: must be one of round_robin, random, least_request, ewma`,
				`tag "impulse.colour=blue": unknown key "colour"`,
				`tag "impulse.route": not KEY=VALUE`,
				`instance n/1: ServiceMeta impulse-route "/a b": path must not contain spaces or control characters; got "/a b"`,
				`instance n/1: ServiceMeta impulse-route "": empty route`,
				`instance n/1: ServiceMeta impulse-lb "consistent_hash"`,
			}},
		{name: "a route the table would refuse is a problem, not an outage", tags: []string{"impulse.route=/x/..;/y", "impulse.route=/ok"},
			instances: []discovery.Instance{meta("n/1", MetaRoute, "/a/%2e%2e;/b")},
			want:      serviceDecl{optedIn: true, routes: routes("/ok"), scheme: "http", lb: "round_robin"},
			problems: []string{`tag "impulse.route=/x/..;/y": path cannot be routed safely`,
				`instance n/1: ServiceMeta impulse-route "/a/%2e%2e;/b": path cannot be routed safely`}},
		{name: "only unusable route tags still opt in", tags: []string{"impulse.route=*/x"},
			want:     serviceDecl{optedIn: true, scheme: "http", lb: "round_robin"},
			problems: []string{`tag "impulse.route=*/x"`}},
		{name: "disagreeing scheme tags", tags: []string{"impulse.route=/", "impulse.scheme=https", "impulse.scheme=http"},
			want:     serviceDecl{optedIn: true, routes: routes("/"), scheme: "https", lb: "round_robin"},
			problems: []string{"tag impulse.scheme has several values [https http]; using \"https\""}},
		{name: "another prefix is not ours", tags: []string{"impulsive.route=/x", "impulse.route=/y"},
			want: serviceDecl{optedIn: true, routes: routes("/y"), scheme: "http", lb: "round_robin"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := declaration("impulse", "http", tc.tags, tc.instances)
			problems := got.problems
			got.problems = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("declaration =\n %+v\nwant\n %+v", got, tc.want)
			}
			if len(problems) != len(tc.problems) {
				t.Errorf("problems %q, want %d", problems, len(tc.problems))
			}
			for _, frag := range tc.problems {
				if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, frag) }) {
					t.Errorf("no problem containing %q in %q", frag, problems)
				}
			}
		})
	}
}

// hclConfig returns a catalog-enabled configuration with one static
// upstream per name → routes (each "HOST/PATH" or "METHOD HOST/PATH").
func hclConfig(t *testing.T, ups map[string][]string) *hcl.Config {
	t.Helper()
	cfg := &hcl.Config{Consul: &hcl.Consul{Catalog: &hcl.Catalog{Enabled: true, TagPrefix: "impulse", DefaultScheme: "http"}}}
	names := make([]string, 0, len(ups))
	for n := range ups {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		u := hcl.Upstream{Name: n, LoadBalancing: "round_robin", Timeouts: hcl.DefaultTimeouts(),
			Backends: []hcl.Backend{{Name: "b", Scheme: "http", Host: "127.0.0.1", Port: 8080, Weight: 1}}}
		for _, spec := range ups[n] {
			var methods []string
			if m, rest, ok := strings.Cut(spec, " "); ok {
				methods, spec = []string{m}, rest
			}
			r := routes(spec)[0]
			r.Methods = methods
			u.Routes = append(u.Routes, r)
		}
		cfg.Upstreams = append(cfg.Upstreams, u)
	}
	return cfg
}

func TestMergeCatalog(t *testing.T) {
	type conflict struct{ route, winner, loser, rule string }
	for _, tc := range []struct {
		name     string
		hcl      map[string][]string
		services map[string][]string
		inst     map[string][]discovery.Instance
		// want is upstream name → "HOST/PATH" routes of the catalog upstreams.
		want      map[string][]string
		conflicts []conflict
		problems  map[string]int
	}{
		{name: "no services", hcl: map[string][]string{"web": {"/"}}, want: map[string][]string{}},
		{name: "tag routes", hcl: map[string][]string{"web": {"/"}},
			services: map[string][]string{"shop": {"impulse.route=/shop"}, "plain": {"impulse.scheme=https"}},
			want:     map[string][]string{"consul:shop": {"/shop"}}},
		{name: "an upstream block wins", hcl: map[string][]string{"shop-hcl": {"/shop"}},
			services:  map[string][]string{"shop": {"impulse.route=/shop", "impulse.route=/shop/v2"}},
			want:      map[string][]string{"consul:shop": {"/shop/v2"}},
			conflicts: []conflict{{"/shop", "shop-hcl", "consul:shop", RuleHCLWins}}},
		{name: "hosts compare case-insensitively", hcl: map[string][]string{"api": {"api.example.com/"}},
			services:  map[string][]string{"api": {"impulse.route=API.Example.com/"}},
			want:      map[string][]string{"consul:api": nil},
			conflicts: []conflict{{"api.example.com/", "api", "consul:api", RuleHCLWins}}},
		{name: "methods make another route", hcl: map[string][]string{"web": {"GET /x", "*.example.com/"}},
			services: map[string][]string{"x": {"impulse.route=/x", "impulse.route=/"}},
			want:     map[string][]string{"consul:x": {"/", "/x"}}},
		{name: "smaller service name wins", hcl: map[string][]string{},
			services:  map[string][]string{"b": {"impulse.route=/same", "impulse.route=/b"}, "a": {"impulse.route=/same"}, "c": {"impulse.route=/same"}},
			want:      map[string][]string{"consul:a": {"/same"}, "consul:b": {"/b"}, "consul:c": nil},
			conflicts: []conflict{{"/same", "consul:a", "consul:b", RuleSmallerNameWins}, {"/same", "consul:a", "consul:c", RuleSmallerNameWins}}},
		{name: "HCL beats the smaller service too", hcl: map[string][]string{"z": {"/same"}},
			services:  map[string][]string{"a": {"impulse.route=/same"}, "b": {"impulse.route=/same"}},
			want:      map[string][]string{"consul:a": nil, "consul:b": nil},
			conflicts: []conflict{{"/same", "z", "consul:a", RuleHCLWins}, {"/same", "z", "consul:b", RuleHCLWins}}},
		{name: "ServiceMeta routes conflict like tags", hcl: map[string][]string{"web": {"/meta"}},
			services:  map[string][]string{"m": {"impulse.enable=true"}},
			inst:      map[string][]discovery.Instance{"m": {meta("n/1", MetaRoute, "/meta,/meta2")}},
			want:      map[string][]string{"consul:m": {"/meta2"}},
			conflicts: []conflict{{"/meta", "web", "consul:m", RuleHCLWins}}},
		{name: "bad tags are reported, the rest applies", hcl: map[string][]string{},
			services: map[string][]string{"bad": {"impulse.route=a:1/x", "impulse.route=/ok", "impulse.lb=fastest"}, "worse": {"impulse.route=?"}},
			want:     map[string][]string{"consul:bad": {"/ok"}, "consul:worse": nil},
			problems: map[string]int{"consul:bad": 2, "consul:worse": 1}},
		{name: "a route escaped_slashes makes unreachable is a problem", hcl: map[string][]string{},
			services: map[string][]string{"enc": {"impulse.route=/x/%2F/y", "impulse.route=/ok"}},
			want:     map[string][]string{"consul:enc": {"/ok"}},
			problems: map[string]int{"consul:enc": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := hclConfig(t, tc.hcl)
			before := reflect.ValueOf(cfg.Upstreams).Len()
			services := tc.services
			if services == nil {
				services = map[string][]string{}
			}
			merged, rep := mergeCatalog(cfg, catalogState{Synced: true, Services: services, Instances: tc.inst})
			if len(cfg.Upstreams) != before {
				t.Fatal("mergeCatalog modified its input")
			}
			if !sameUpstreams(merged.Upstreams[:before], cfg.Upstreams) {
				t.Fatal("the upstream blocks changed")
			}
			got := map[string][]string{}
			var order []string
			for _, u := range merged.Upstreams[before:] {
				order = append(order, u.Name)
				if !rep.Upstreams[u.Name] || rep.source(u.Name) != u.Name {
					t.Errorf("report lacks upstream %s", u.Name)
				}
				svc := strings.TrimPrefix(u.Name, "consul:")
				if u.Consul == nil || !reflect.DeepEqual(*u.Consul, hcl.UpstreamConsul{Service: svc, Health: "passing", Scheme: "http"}) ||
					u.Timeouts != hcl.DefaultTimeouts() || u.LoadBalancing == "" {
					t.Errorf("upstream %+v", u)
				}
				var rs []string
				for _, r := range u.Routes {
					rs = append(rs, r.Host+r.PathPrefix)
				}
				got[u.Name] = rs
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("catalog upstreams %v, want %v", got, tc.want)
			}
			if !slices.IsSorted(order) {
				t.Errorf("catalog upstreams not in name order: %v", order)
			}
			var conflicts []conflict
			for _, c := range rep.Conflicts {
				conflicts = append(conflicts, conflict{c.Host + c.PathPrefix, c.Winner, c.Loser, c.Rule})
				wantSrc := SourceHCL
				if strings.HasPrefix(c.Winner, "consul:") {
					wantSrc = c.Winner
				}
				if c.WinnerSource != wantSrc || c.LoserSource != c.Loser {
					t.Errorf("conflict sources %+v", c)
				}
			}
			if !reflect.DeepEqual(conflicts, tc.conflicts) {
				t.Errorf("conflicts %v, want %v", conflicts, tc.conflicts)
			}
			for up, n := range tc.problems {
				if len(rep.Problems[up]) != n {
					t.Errorf("problems of %s: %q, want %d", up, rep.Problems[up], n)
				}
			}
			if len(rep.Problems) != len(tc.problems) {
				t.Errorf("problems %v", rep.Problems)
			}

			// Whatever Consul declares, the gateway accepts the result.
			var gc gateway.Config
			for _, u := range merged.Upstreams {
				uc, err := upstreamConfig(u)
				if err != nil {
					t.Fatal(err)
				}
				gc.Upstreams = append(gc.Upstreams, uc)
			}
			gw, err := gateway.New(gc)
			if err != nil {
				t.Fatalf("gateway.New rejects the merged configuration: %v", err)
			}
			_ = gw.Shutdown(t.Context())
		})
	}
}

func TestMergeCatalogOffOrNotSynced(t *testing.T) {
	st := catalogState{Synced: true, Services: map[string][]string{"shop": {"impulse.route=/shop"}}}
	cfg := hclConfig(t, map[string][]string{"web": {"/"}})
	cfg.Consul.Catalog.Enabled = false
	if merged, rep := mergeCatalog(cfg, st); merged != cfg || len(rep.Upstreams) != 0 {
		t.Fatalf("catalog off: %+v %+v", merged, rep)
	}
	cfg.Consul = nil
	if merged, _ := mergeCatalog(cfg, st); merged != cfg {
		t.Fatal("without consul block: config changed")
	}
	cfg = hclConfig(t, map[string][]string{"web": {"/"}})
	if merged, _ := mergeCatalog(cfg, catalogState{}); merged != cfg {
		t.Fatal("before the catalog answered: config changed")
	}
	// Another prefix and scheme.
	cfg.Consul.Catalog.TagPrefix, cfg.Consul.Catalog.DefaultScheme = "edge", "https"
	merged, _ := mergeCatalog(cfg, catalogState{Synced: true, Services: map[string][]string{
		"a": {"edge.route=/a"}, "b": {"impulse.route=/b"}, "c": {"edge.route=/c", "edge.scheme=http"}}})
	if n := len(merged.Upstreams); n != 3 || merged.Upstreams[1].Consul.Scheme != "https" || merged.Upstreams[2].Consul.Scheme != "http" {
		t.Fatalf("upstreams %+v", merged.Upstreams)
	}
}

func TestRouteEntries(t *testing.T) {
	cfg := hclConfig(t, map[string][]string{"shop-hcl": {"/shop"}})
	merged, rep := mergeCatalog(cfg, catalogState{Synced: true, Services: map[string][]string{
		"shop": {"impulse.route=/shop", "impulse.route=/cart"}, "zoo": {"impulse.route=/cart"}}})
	var gc gateway.Config
	for _, u := range merged.Upstreams {
		uc, _ := upstreamConfig(u)
		gc.Upstreams = append(gc.Upstreams, uc)
	}
	gw, err := gateway.New(gc)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Shutdown(t.Context())
	got := routeEntries(gw.Routes(), &rep)
	want := []routeEntry{
		{RouteInfo: gateway.RouteInfo{Upstream: "consul:shop", PathPrefix: "/cart", Methods: []string{}, Upgrades: gateway.DefaultUpgrades}, Source: "consul:shop",
			Conflicts: []conflictEntry{{Upstream: "consul:zoo", Source: "consul:zoo", Rule: RuleSmallerNameWins}}},
		{RouteInfo: gateway.RouteInfo{Upstream: "shop-hcl", PathPrefix: "/shop", Methods: []string{}, Upgrades: gateway.DefaultUpgrades}, Source: "hcl",
			Conflicts: []conflictEntry{{Upstream: "consul:shop", Source: "consul:shop", Rule: RuleHCLWins}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("routeEntries =\n %+v\nwant\n %+v", got, want)
	}
	ups := upstreamEntries(gw.Upstreams(), &rep)
	if len(ups) != 3 || ups[0].Source != "consul:shop" || ups[1].Source != "consul:zoo" || ups[2].Source != "hcl" {
		t.Fatalf("upstreamEntries %+v", ups)
	}
}

// TestReadinessIgnoresCatalogUpstreams: a catalog upstream that has not
// synced does not make the gateway unready; an upstream block does.
func TestReadinessIgnoresCatalogUpstreams(t *testing.T) {
	gw, err := gateway.New(gateway.Config{Upstreams: []gateway.UpstreamConfig{
		{Config: upstreamCfg("web", true), Routes: []gateway.RouteConfig{{PathPrefix: "/"}}},
		{Config: upstreamCfg("consul:shop", true), Routes: []gateway.RouteConfig{{PathPrefix: "/shop"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Shutdown(t.Context())
	a := &Agent{gw: gw, cfg: &hcl.Config{}}
	a.disc = newDiscoverySet(hclog.NewNullLogger(), nil, gw, nil)
	defer a.disc.stop()
	a.catalog.Store(&catalogReport{Upstreams: map[string]bool{"consul:shop": true}})
	ok, reasons, _ := a.ready()
	joined := strings.Join(reasons, "\n")
	if ok || !strings.Contains(joined, "upstream web") || strings.Contains(joined, "consul:shop") {
		t.Fatalf("ready = %v %q", ok, reasons)
	}
}

func upstreamCfg(name string, discovered bool) upstream.Config {
	return upstream.Config{Name: name, Discovered: discovered}
}

// TestReadinessAfterFirstReady: an upstream whose discovery has not synced
// fails readiness at startup; once the gateway was ready, the same state
// (an upstream added by a reload during a Consul outage) only degrades it.
func TestReadinessAfterFirstReady(t *testing.T) {
	gw, err := gateway.New(gateway.Config{Upstreams: []gateway.UpstreamConfig{
		{Config: upstreamCfg("web", true), Routes: []gateway.RouteConfig{{PathPrefix: "/"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Shutdown(t.Context())
	a := &Agent{gw: gw, cfg: &hcl.Config{}, log: hclog.NewInterceptLogger(&hclog.LoggerOptions{Output: io.Discard})}
	a.disc = newDiscoverySet(hclog.NewNullLogger(), nil, gw, nil)
	defer a.disc.stop()
	a.catalog.Store(&catalogReport{})
	if ok, reasons, _ := a.ready(); ok || !strings.Contains(strings.Join(reasons, "\n"), "upstream web") {
		t.Fatalf("at startup: ready = %v %q", ok, reasons)
	}
	a.wasReady.Store(true)
	// No listener runs in this test: that reason stays; the upstream's moves.
	_, reasons, degraded := a.ready()
	if strings.Contains(strings.Join(reasons, "\n"), "upstream web") || !strings.Contains(strings.Join(degraded, "\n"), "upstream web") {
		t.Fatalf("after the first ready: reasons %q, degraded %q", reasons, degraded)
	}
	a.draining.Store(true)
	if ok, reasons, _ := a.ready(); ok || !slices.Contains(reasons, "draining") {
		t.Fatalf("draining: ready = %v %q", ok, reasons)
	}
}

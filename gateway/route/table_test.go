package route

import "testing"

func TestMatch(t *testing.T) {
	defs := []Definition{
		{Upstream: "root", PathPrefix: "/"},
		{Upstream: "sales-ui", PathPrefix: "/sales"},
		{Upstream: "sales-api", PathPrefix: "/sales/api"},
		{Upstream: "web", Host: "web.example.com", PathPrefix: "/"},
		{Upstream: "wild", Host: "*.example.com", PathPrefix: "/"},
		{Upstream: "deep", Host: "*.b.example.com", PathPrefix: "/"},
		{Upstream: "posts", PathPrefix: "/items", Methods: []string{"post"}},
		{Upstream: "items", PathPrefix: "/items"},
		{Upstream: "slash", PathPrefix: "/static/"},
	}
	targets := map[string]string{}
	for _, d := range defs {
		targets[d.Upstream] = d.Upstream
	}
	tbl, err := Build(defs, targets)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ host, path, method, want string }{
		{"any", "/", "GET", "root"},
		{"any", "/sales", "GET", "sales-ui"},
		{"any", "/sales/", "GET", "sales-ui"},
		{"any", "/sales/api/orders", "GET", "sales-api"},
		{"any", "/salesx", "GET", "root"},
		{"any", "/sales/apix", "GET", "sales-ui"},
		{"web.example.com", "/sales", "GET", "web"},
		{"WEB.example.com:8443", "/", "GET", "web"},
		{"web.example.com.", "/", "GET", "web"},
		{"x.example.com", "/", "GET", "wild"},
		{"a.b.example.com", "/", "GET", "deep"},
		{"b.example.com", "/", "GET", "wild"},
		{"example.com", "/", "GET", "root"},
		{"any", "/items", "POST", "posts"},
		{"any", "/items/1", "GET", "items"},
		{"any", "/static/x.css", "GET", "slash"},
		{"any", "/static", "GET", "root"},
		{"[::1]:443", "/", "GET", "root"},
	}
	for _, c := range cases {
		r := tbl.Match(c.host, c.path, c.method)
		got := ""
		if r != nil {
			got = r.Target
		}
		if got != c.want {
			t.Errorf("Match(%q, %q, %q) = %q, want %q", c.host, c.path, c.method, got, c.want)
		}
	}
}

func TestNoRoute(t *testing.T) {
	tbl, err := Build([]Definition{{Upstream: "a", Host: "a.example.com", PathPrefix: "/api"}}, map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][2]string{{"a.example.com", "/"}, {"b.example.com", "/api"}, {"a.example.com", "/apiv2"}} {
		if r := tbl.Match(c[0], c[1], "GET"); r != nil {
			t.Errorf("Match(%q, %q) = %v, want nil", c[0], c[1], r.Upstream)
		}
	}
}

func TestBuildErrors(t *testing.T) {
	cases := []struct {
		name string
		defs []Definition
	}{
		{"unknown upstream", []Definition{{Upstream: "nope", PathPrefix: "/"}}},
		{"no slash", []Definition{{Upstream: "a", PathPrefix: "api"}}},
		{"inner wildcard", []Definition{{Upstream: "a", Host: "a.*.com", PathPrefix: "/"}}},
		{"second wildcard", []Definition{{Upstream: "a", Host: "*.*", PathPrefix: "/"}}},      // FuzzMatch
		{"wildcard inside", []Definition{{Upstream: "a", Host: "*.a*.com", PathPrefix: "/"}}}, // FuzzMatch
		{"duplicate", []Definition{{Upstream: "a", PathPrefix: "/"}, {Upstream: "b", PathPrefix: "/"}}},
	}
	for _, c := range cases {
		if _, err := Build(c.defs, map[string]int{"a": 1, "b": 2}); err == nil {
			t.Errorf("%s: Build succeeded, want error", c.name)
		}
	}
}

func TestOrderDeterministic(t *testing.T) {
	defs := []Definition{
		{Upstream: "b", PathPrefix: "/x", Methods: []string{"GET"}},
		{Upstream: "a", PathPrefix: "/x", Methods: []string{"PUT"}},
		{Upstream: "c", PathPrefix: "/"},
		{Upstream: "d", Host: "h", PathPrefix: "/"},
	}
	tbl, err := Build(defs, map[string]int{"a": 1, "b": 2, "c": 3, "d": 4})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range tbl.Routes() {
		got = append(got, r.Upstream)
	}
	want := []string{"d", "a", "b", "c"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order = %v, want %v", got, want)
		}
	}
}

func BenchmarkMatch1000(b *testing.B) {
	var defs []Definition
	targets := map[string]int{}
	for i := 0; i < 1000; i++ {
		name := "u" + itoa(i)
		targets[name] = i
		defs = append(defs, Definition{Upstream: name, Host: name + ".example.com", PathPrefix: "/api/" + itoa(i%10)})
	}
	tbl, err := Build(defs, targets)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if tbl.Match("u500.example.com", "/api/0/items", "GET") == nil {
			b.Fatal("no match")
		}
	}
}

// TestPathIndex: a table whose lists are indexed by path prefix matches
// every request as one whose lists are scanned: prefixes that nest, end in
// "/" or not, share lengths, carry methods or not, under one host, a
// wildcard and any host.
func TestPathIndex(t *testing.T) {
	var defs []Definition
	targets := map[string]int{}
	prefixes := []string{"/", "/a", "/a/", "/ab", "/a/b", "/a/b/", "/a/bc", "/b", "/b/c/d", "/%7Eu", "/x/y/z/", "/x/y"}
	for i, host := range []string{"", "h.example.com", "*.example.com"} {
		for j, p := range prefixes {
			up := "u" + itoa(j%4)
			targets[up] = j % 4
			defs = append(defs, Definition{Upstream: up, Host: host, PathPrefix: p, Index: i*100 + j})
			if j%3 == 0 {
				defs = append(defs, Definition{Upstream: up, Host: host, PathPrefix: p, Methods: []string{"post"}, Index: i*100 + j + 50})
			}
		}
	}
	scanned := withPathIndexMin(1<<30, func() *Table[int] { return mustBuild(t, defs, targets) })
	indexed := withPathIndexMin(1, func() *Table[int] { return mustBuild(t, defs, targets) })
	if indexed.any.index == nil || scanned.any.index != nil {
		t.Fatal("pathIndexMin not obeyed")
	}
	paths := []string{"/", "*", "/a", "/a/", "/a/b", "/a/b/c", "/ab", "/abc", "/a/bc", "/a/bcd", "/a/bc/d", "/b", "/b/", "/b/c", "/b/c/d", "/b/c/de",
		"/b/c/d/e", "/~u", "/~u/x", "/x/y", "/x/y/", "/x/y/z", "/x/y/z/w", "/x/yz", "/c", "//a", "/a//b"}
	for _, host := range []string{"h.example.com", "w.example.com", "other"} {
		for _, p := range paths {
			for _, m := range []string{"GET", "POST"} {
				want, got := scanned.Match(host, p, m), indexed.Match(host, p, m)
				if want != nil && got != nil && want.ID == got.ID && want.Upstream == got.Upstream && want.Index == got.Index || want == nil && got == nil {
					continue
				}
				t.Errorf("Match(%q, %q, %q): indexed %v, scanned %v", host, p, m, got, want)
			}
		}
	}
}

func mustBuild(t *testing.T, defs []Definition, targets map[string]int) *Table[int] {
	t.Helper()
	tbl, err := Build(defs, targets)
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// catalogDefs are the definitions of BenchmarkMatch5000 and
// BenchmarkBuild5000: n upstreams "consul:svcN" with a host route
// svcN.example.com/ each, and every tenth a path route /svcN too.
func catalogDefs(n int) ([]Definition, map[string]int) {
	var defs []Definition
	targets := map[string]int{}
	for i := 0; i < n; i++ {
		name := "consul:svc" + itoa(i)
		targets[name] = i
		defs = append(defs, Definition{Upstream: name, Host: "svc" + itoa(i) + ".example.com", PathPrefix: "/"})
		if i%10 == 0 {
			defs = append(defs, Definition{Upstream: name, PathPrefix: "/svc" + itoa(i)})
		}
	}
	return defs, targets
}

// BenchmarkBuild5000 is route.Build of the catalog at scale (issue 26):
// 5,500 routes of 5,000 upstreams.
func BenchmarkBuild5000(b *testing.B) {
	defs, targets := catalogDefs(5000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(defs, targets); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMatch5000: the catalog at scale (issue 26), 5,000 upstreams
// with a host route each (svcN.example.com/) and every tenth a path route
// too (/svcN, any host), as the catalog mode makes them. The lookups: a
// host route, a path route under a host that has its own, and a path route
// reached through the any-host list of 500 routes.
func BenchmarkMatch5000(b *testing.B) {
	defs, targets := catalogDefs(5000)
	tbl, err := Build(defs, targets)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct{ name, host, path string }{
		{"host", "svc2500.example.com", "/api/items"},
		{"host-with-port", "svc2500.example.com:443", "/svc4990/items"},
		{"path-any-host", "gateway.example.com", "/svc2500/items"},
		{"path-any-host-last", "gateway.example.com", "/svc0/items"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if tbl.Match(c.host, c.path, "GET") == nil {
					b.Fatal("no match")
				}
			}
		})
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// TestPrefixInNormalForm: a prefix is compared in its normal form, and one
// whose dot-segments normalisation would remove is refused.
func TestPrefixInNormalForm(t *testing.T) {
	tbl, err := Build([]Definition{{Upstream: "u", PathPrefix: "/%7eu/caf\xc3\xa9"}}, map[string]int{"u": 1})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Match("h", "/~u/caf%C3%A9/x", "GET") == nil {
		t.Error("the normal form of the request does not match the prefix's")
	}
	for _, p := range []string{"/a/%2E%2E", "/a/./b", "/a%00", "/a%2"} {
		if _, err := Build([]Definition{{Upstream: "u", PathPrefix: p}}, map[string]int{"u": 1}); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
}

// TestRouteID: a route's ID depends on what it matches, not on its
// upstream or position, is the same in every Build, and differs between
// routes.
func TestRouteID(t *testing.T) {
	build := func(defs ...Definition) *Table[string] {
		targets := map[string]string{}
		for _, d := range defs {
			targets[d.Upstream] = d.Upstream
		}
		tbl, err := Build(defs, targets)
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}
	a := Definition{Upstream: "a", Host: "Web.example.com", PathPrefix: "/api", Methods: []string{"post", "GET"}}
	b := Definition{Upstream: "b", PathPrefix: "/api"}
	t1 := build(a, b)
	a2 := a
	a2.Upstream, a2.Host, a2.Methods, a2.Index = "other", "web.example.com", []string{"GET", "POST"}, 3
	t2 := build(b, a2)
	id1 := t1.Match("web.example.com", "/api", "GET").ID
	id2 := t2.Match("web.example.com", "/api", "GET").ID
	if id1 == "" || id1 != id2 {
		t.Errorf("IDs of the same route differ: %q, %q", id1, id2)
	}
	if other := t1.Match("any", "/api", "GET").ID; other == id1 || other == "" {
		t.Errorf("distinct routes share ID %q", other)
	}
}

// TestHostCaseASCII: hosts fold ASCII case only, alike in Build and Match:
// a definition's non-ASCII byte stays itself (strings.ToLower made U+FFFD
// of it, so no request could match; FuzzMatch) and the Kelvin sign is no
// "k".
func TestHostCaseASCII(t *testing.T) {
	tbl, err := Build([]Definition{{Upstream: "b", Host: "\xb0.Example.COM", PathPrefix: "/"}, {Upstream: "k", Host: "\u212a.example.com", PathPrefix: "/"}},
		map[string]string{"b": "b", "k": "k"})
	if err != nil {
		t.Fatal(err)
	}
	if r := tbl.Match("\xb0.example.com", "/", "GET"); r == nil || r.Target != "b" {
		t.Errorf("\\xb0.example.com: %v, want b", r)
	}
	if r := tbl.Match("\xd0.example.com", "/", "GET"); r != nil {
		t.Errorf("\\xd0.example.com: %v, want no route", r)
	}
	if r := tbl.Match("k.example.com", "/", "GET"); r != nil {
		t.Errorf("k.example.com: %v, want no route (the definition is the Kelvin sign)", r)
	}
}

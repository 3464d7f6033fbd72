package mesh

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

func src(name string) ServiceID {
	return ServiceID{TrustDomain: td, Namespace: "default", Datacenter: "dc1", Service: name}
}

func l4(source, dest, action string) Intention {
	return Intention{SourceNS: "default", SourceName: source, DestinationNS: "default", DestinationName: dest, Action: action}
}

// req builds a request with its path through RequestPath, as the gateway
// hands it over.
func req(t *testing.T, method, raw string, hdr ...string) *Request {
	t.Helper()
	p, err := RequestPath(raw, pathnorm.PathOptions{})
	if err != nil {
		t.Fatalf("RequestPath(%q): %v", raw, err)
	}
	r := &Request{Method: method, Path: p, Host: "web", Header: http.Header{}}
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func mustCompile(t *testing.T, ints []Intention, defaultAllow bool) *Rules {
	t.Helper()
	r, problems := Compile(ints, defaultAllow)
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	return r
}

// TestIntentionPrecedence: the highest-precedence intention whose source
// matches wins, whatever the order given; exact names beat wildcards, an
// exact destination beats a wildcard one (Consul "Intentions → Precedence
// and match order"); no match is the ACL default.
func TestIntentionPrecedence(t *testing.T) {
	ints := []Intention{
		l4("*", "*", "allow"),        // 3 (computed)
		l4("client", "*", "deny"),    // 6
		l4("*", "web", "deny"),       // 8
		l4("client", "web", "allow"), // 9
		{SourceNS: "*", SourceName: "*", DestinationNS: "default", DestinationName: "web", Action: "allow"}, // 7
		{SourcePeer: "east", SourceNS: "default", SourceName: "client", DestinationNS: "default", DestinationName: "web", Action: "deny", Precedence: 9},
		{SourcePartition: "team", SourceNS: "default", SourceName: "admin", DestinationName: "web", Action: "allow", Precedence: 9},
	}
	for _, defaultAllow := range []bool{true, false} {
		r := mustCompile(t, ints, defaultAllow)
		for _, c := range []struct {
			id    ServiceID
			allow bool
			by    Verdict
		}{
			{src("client"), true, ByL4}, // client -> web (9) beats the peer's and every wildcard
			{src("other"), false, ByL4}, // * -> web (8) beats client -> * and */* -> web
			{ServiceID{TrustDomain: td, Namespace: "ops", Datacenter: "dc1", Service: "x"}, true, ByL4}, // only */* -> web
			{ServiceID{TrustDomain: td, Partition: "team", Namespace: "default", Datacenter: "dc1", Service: "admin"}, true, ByL4},
			{ServiceID{TrustDomain: td, Partition: "other", Namespace: "default", Datacenter: "dc1", Service: "admin"}, defaultAllow, ByDefault},
		} {
			for name, d := range map[string]Decision{"conn": r.AuthorizeConn(c.id), "request": r.Authorize(c.id, req(t, "GET", "/"))} {
				if d.Allow != c.allow || d.By != c.by {
					t.Errorf("default %v, %s, %s: %+v; want allow %v by %v", defaultAllow, c.id, name, d, c.allow, c.by)
				}
			}
		}
	}
	// Without intentions: the default, both ways.
	for _, def := range []bool{true, false} {
		if d := mustCompile(t, nil, def).Authorize(src("client"), req(t, "GET", "/")); d.Allow != def || d.By != ByDefault || d.Intention != "" {
			t.Errorf("no intention, default %v: %+v", def, d)
		}
	}
	// Equal precedence keeps the order given (Consul's).
	r := mustCompile(t, []Intention{{ID: "first", SourceName: "*", DestinationName: "web", Action: "deny", Precedence: 8},
		{ID: "second", SourceName: "*", DestinationName: "web", Action: "allow", Precedence: 8}}, true)
	if d := r.Authorize(src("a"), req(t, "GET", "/")); d.Intention != "first" || d.Allow {
		t.Errorf("equal precedence: %+v, want the first given", d)
	}
}

// m03 is case M03's service-intentions entry for web: client's L7
// permissions, and every other source denied.
func m03() []Intention {
	return []Intention{
		{ID: "client", SourceNS: "default", SourceName: "client", DestinationNS: "default", DestinationName: "web", Permissions: []Permission{
			{Action: "allow", HTTP: &HTTPMatch{PathPrefix: "/api/", Methods: []string{"GET"}}},
			{Action: "deny", HTTP: &HTTPMatch{PathExact: "/admin"}},
			{Action: "allow", HTTP: &HTTPMatch{PathPrefix: "/ops/", Header: []HeaderMatch{{Name: "X-Role", Exact: "ops"}}}},
		}},
		{ID: "star", SourceNS: "default", SourceName: "*", DestinationNS: "default", DestinationName: "web", Action: "deny"},
	}
}

// TestIntentionsL7 (case M03's decisions): the first matching permission
// decides, a request no permission matches gets the ACL default; paths are
// matched normalised, so spellings of "/admin" are decided as "/admin".
func TestIntentionsL7(t *testing.T) {
	for _, defaultAllow := range []bool{false, true} {
		r := mustCompile(t, m03(), defaultAllow)
		def := defaultAllow
		cases := []struct {
			r     *Request
			allow bool
			by    Verdict
			perm  int
		}{
			{req(t, "GET", "/api/users"), true, ByPermission, 0},
			{req(t, "POST", "/api/users"), def, ByL7Default, -1},
			{req(t, "GET", "/admin"), false, ByPermission, 1},
			{req(t, "GET", "//admin"), false, ByPermission, 1},
			{req(t, "GET", "/api/../admin"), false, ByPermission, 1},
			{req(t, "GET", "/a/./b/../../admin"), false, ByPermission, 1},
			{req(t, "GET", "/%61dmin"), false, ByPermission, 1},
			{req(t, "GET", "/ADMIN"), def, ByL7Default, -1}, // case-sensitive, as Envoy matches paths
			{req(t, "GET", "/admin/x"), def, ByL7Default, -1},
			{req(t, "GET", "/ops/restart", "X-Role", "ops"), true, ByPermission, 2},
			{req(t, "GET", "/ops/restart", "X-Role", "OPS"), def, ByL7Default, -1},
			{req(t, "GET", "/ops/restart"), def, ByL7Default, -1},
			{req(t, "GET", "/ops/restart", "x-role", "ops"), true, ByPermission, 2}, // header names are case-insensitive
			{req(t, "GET", "//api//users"), true, ByPermission, 0},
		}
		for _, c := range cases {
			d := r.Authorize(src("client"), c.r)
			if d.Allow != c.allow || d.By != c.by || d.Permission != c.perm || d.Intention != "client" {
				t.Errorf("default %v: %s %s: %+v; want allow %v by %v permission %d", defaultAllow, c.r.Method, c.r.Path, d, c.allow, c.by, c.perm)
			}
		}
		if d := r.AuthorizeConn(src("client")); !d.Allow || d.By != NeedsRequest {
			t.Errorf("connection of an L7 source: %+v", d)
		}
		if d := r.Authorize(src("other"), req(t, "GET", "/api/users")); d.Allow || d.By != ByL4 || d.Intention != "star" {
			t.Errorf("another source: %+v", d)
		}
	}
	// "/admin;x" is "/admin" to a servlet container: with the default
	// allow, it would otherwise slip past the deny on "/admin".
	r := mustCompile(t, m03(), true)
	if d := r.Authorize(src("client"), req(t, "GET", "/admin;jsessionid=1")); d.Allow || d.By != ByAmbiguousPath {
		t.Errorf("/admin;x: %+v, want denied as ambiguous", d)
	}
	if d := r.Authorize(src("client"), req(t, "GET", "/api/a;v=1")); !d.Allow || d.By != ByPermission {
		t.Errorf("/api/a;v=1 (decided alike both ways): %+v", d)
	}
}

func TestPermissionMatchers(t *testing.T) {
	one := func(h HTTPMatch) *Rules {
		return mustCompile(t, []Intention{{ID: "x", SourceName: "client", DestinationName: "web",
			Permissions: []Permission{{Action: "allow", HTTP: &h}}}}, false)
	}
	cases := []struct {
		name string
		h    HTTPMatch
		r    *Request
		want bool
	}{
		{"regex whole path", HTTPMatch{PathRegex: "/api/[0-9]+"}, req(t, "GET", "/api/12"), true},
		{"regex is anchored", HTTPMatch{PathRegex: "/api/[0-9]+"}, req(t, "GET", "/api/12/x"), false},
		{"regex alternation stays anchored", HTTPMatch{PathRegex: "/a|/b"}, req(t, "GET", "/b/c"), false},
		{"methods", HTTPMatch{Methods: []string{"GET", "HEAD"}}, req(t, "HEAD", "/"), true},
		{"methods miss", HTTPMatch{Methods: []string{"GET", "HEAD"}}, req(t, "DELETE", "/"), false},
		{"methods are case-sensitive", HTTPMatch{Methods: []string{"GET"}}, req(t, "get", "/"), false},
		{"no criteria matches all", HTTPMatch{}, req(t, "PATCH", "/x"), true},
		{"present", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Present: true}}}, req(t, "GET", "/", "X-A", ""), true},
		{"present absent", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Present: true}}}, req(t, "GET", "/"), false},
		{"inverted present, absent", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Present: true, Invert: true}}}, req(t, "GET", "/"), true},
		{"inverted exact, absent: no match (Envoy)", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Exact: "1", Invert: true}}}, req(t, "GET", "/"), false},
		{"inverted exact, other value", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Exact: "1", Invert: true}}}, req(t, "GET", "/", "X-A", "2"), true},
		{"prefix", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Prefix: "Bear"}}}, req(t, "GET", "/", "X-A", "Bearer x"), true},
		{"suffix", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Suffix: ".internal"}}}, req(t, "GET", "/", "X-A", "a.internal"), true},
		{"contains", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Contains: "mid"}}}, req(t, "GET", "/", "X-A", "a-mid-b"), true},
		{"contains, ignore case", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Contains: "MID", IgnoreCase: true}}}, req(t, "GET", "/", "X-A", "a-mid-b"), true},
		{"exact, ignore case", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Exact: "OPS", IgnoreCase: true}}}, req(t, "GET", "/", "X-A", "ops"), true},
		{"prefix, ignore case", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Prefix: "BEAR", IgnoreCase: true}}}, req(t, "GET", "/", "X-A", "bearer"), true},
		{"suffix, ignore case", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Suffix: "X", IgnoreCase: true}}}, req(t, "GET", "/", "X-A", "ax"), true},
		{"regex whole value", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Regex: "[a-z]+"}}}, req(t, "GET", "/", "X-A", "abc1"), false},
		{"several values joined with ','", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Exact: "a,b"}}}, req(t, "GET", "/", "X-A", "a", "X-A", "b"), true},
		{"several values: one alone does not match", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Exact: "a"}}}, req(t, "GET", "/", "X-A", "a", "X-A", "b"), false},
		{"host", HTTPMatch{Header: []HeaderMatch{{Name: "Host", Exact: "web"}}}, req(t, "GET", "/"), true},
		{":authority", HTTPMatch{Header: []HeaderMatch{{Name: ":authority", Prefix: "we"}}}, req(t, "GET", "/"), true},
		{"all headers must match", HTTPMatch{Header: []HeaderMatch{{Name: "X-A", Present: true}, {Name: "X-B", Present: true}}}, req(t, "GET", "/", "X-A", "1"), false},
	}
	for _, c := range cases {
		if d := one(c.h).Authorize(src("client"), c.r); d.Allow != c.want {
			t.Errorf("%s: %+v, want allow %v", c.name, d, c.want)
		}
	}
}

// TestIntentionProblems: an intention that cannot be compiled is reported
// once and denies its sources (even under a default allow), still in its
// place in the precedence order; the rest compile.
func TestIntentionProblems(t *testing.T) {
	bad := []struct {
		name string
		in   Intention
		want string
	}{
		{"a regex RE2 refuses", Intention{Permissions: []Permission{{Action: "allow", HTTP: &HTTPMatch{PathRegex: "(a"}}}}, "path_regex"},
		{"a Perl look-ahead", Intention{Permissions: []Permission{{Action: "allow", HTTP: &HTTPMatch{Header: []HeaderMatch{{Name: "X", Regex: "a(?=b)"}}}}}}, "regex"},
		{"a regex escaping its anchors", Intention{Permissions: []Permission{{Action: "allow", HTTP: &HTTPMatch{PathRegex: "/x)|(.*"}}}}, "path_regex"},
		{"an unknown action", Intention{Action: "maybe"}, "action"},
		{"no action", Intention{}, "action"},
		{"an action beside permissions", Intention{Action: "allow", Permissions: []Permission{{Action: "allow"}}}, "beside"},
		{"a permission without a valid action", Intention{Permissions: []Permission{{Action: "Allow"}}}, "action"},
		{"two path matchers", Intention{Permissions: []Permission{{Action: "allow", HTTP: &HTTPMatch{PathExact: "/a", PathPrefix: "/b"}}}}, "more than one"},
		{"a header with two matchers", Intention{Permissions: []Permission{{Action: "allow", HTTP: &HTTPMatch{Header: []HeaderMatch{{Name: "X", Exact: "a", Prefix: "b"}}}}}}, "exactly one"},
		{"a header with none", Intention{Permissions: []Permission{{Action: "allow", HTTP: &HTTPMatch{Header: []HeaderMatch{{Name: "X"}}}}}}, "exactly one"},
		{"a JWT requirement", Intention{Permissions: []Permission{{Action: "allow", Unsupported: "JWT"}}}, "JWT"},
		{"a wildcard namespace with an exact name", Intention{SourceNS: "*", SourceName: "client", Action: "allow"}, "wildcard"},
	}
	for _, c := range bad {
		in := c.in
		in.ID = "bad"
		if in.SourceName == "" {
			in.SourceName = "client"
		}
		in.DestinationName = "web"
		ints := []Intention{in, l4("*", "web", "allow")}
		r, problems := Compile(ints, true)
		if len(problems) != 1 || problems[0].Intention != "bad" || !strings.Contains(problems[0].Error(), c.want) {
			t.Errorf("%s: problems %v, want one mentioning %q", c.name, problems, c.want)
			continue
		}
		if in.SourceNS == "*" {
			continue
		}
		for name, d := range map[string]Decision{"conn": r.AuthorizeConn(src("client")), "request": r.Authorize(src("client"), req(t, "GET", "/x"))} {
			if d.Allow || d.By != ByInvalid || d.Intention != "bad" {
				t.Errorf("%s: %s %+v, want denied by the invalid intention", c.name, name, d)
			}
		}
		if d := r.Authorize(src("other"), req(t, "GET", "/x")); !d.Allow {
			t.Errorf("%s: another source %+v, want the * allow", c.name, d)
		}
	}
	var p Problem
	_, problems := Compile([]Intention{{SourceName: "a", DestinationName: "web", Action: "x"}}, false)
	if len(problems) != 1 || !errors.As(error(problems[0]), &p) || p.Intention != "a -> web" {
		t.Errorf("an intention without ID is named by source and destination: %v", problems)
	}
}

func TestVerdictNames(t *testing.T) {
	for v := ByDefault; v <= NeedsRequest; v++ {
		if v.String() == "" {
			t.Errorf("verdict %d has no name", v)
		}
	}
}

// TestFindIsFirstMatch: the indexed lookup picks, for any identity, the
// first intention in precedence order whose source matches it — as a
// plain scan of the compiled rules does (seeded, deterministic).
func TestFindIsFirstMatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	for round := range 300 {
		var ints []Intention
		for range rng.IntN(12) {
			in := Intention{SourceName: pick("a", "b", "*"), SourceNS: pick("", "default", "ops", "*"),
				SourcePartition: pick("", "", "team"), SourcePeer: pick("", "", "", "east"),
				DestinationName: pick("web", "*"), Action: pick("allow", "deny"), Precedence: rng.IntN(10)}
			if in.SourceNS == "*" {
				in.SourceName = "*"
			}
			ints = append(ints, in)
		}
		r, _ := Compile(ints, false)
		for _, id := range []ServiceID{
			{Service: "a"}, {Service: "b", Namespace: "ops"}, {Service: "c", Partition: "team"}, {Service: "a", Namespace: "x"},
		} {
			var want *rule
			for i := range r.ixns {
				if r.ixns[i].sourceMatches(id) {
					want = &r.ixns[i]
					break
				}
			}
			if got := r.find(id); got != want {
				t.Fatalf("round %d, %+v: find %p, scan %p (intentions %+v)", round, id, got, want, ints)
			}
		}
	}
}

package route

import (
	"strings"
	"testing"
)

// TestPathKinds: within one host, an exact path wins over a regular
// expression, which wins over any prefix; a longer pattern is tried
// first; host specificity still comes first; methods still filter; a
// path longer than MaxRegexPathBytes never matches a regex; indexed lists
// (pathIndexMin routes and more) agree with scanned ones.
func TestPathKinds(t *testing.T) {
	defs := []Definition{
		{Upstream: "prefix", PathPrefix: "/"},
		{Upstream: "api", PathPrefix: "/api/"},
		{Upstream: "exact", Path: "/api/health"},
		{Upstream: "exactpost", Path: "/api/users", Methods: []string{"POST"}},
		{Upstream: "re", PathRegex: `/api/users/[0-9]+`},
		{Upstream: "relong", PathRegex: `/api/users/[0-9]+(/.*)?`},
		{Upstream: "hosted", Host: "h.example.com", PathPrefix: "/api/"},
	}
	targets := map[string]string{}
	for _, d := range defs {
		targets[d.Upstream] = d.Upstream
	}
	for _, n := range []int{100, 1} {
		old := pathIndexMin
		pathIndexMin = n
		tbl, err := Build(defs, targets)
		pathIndexMin = old
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ host, path, method, want string }{
			{"x", "/api/health", "GET", "exact"},
			{"x", "/api/health/x", "GET", "api"},
			{"x", "/api/users", "POST", "exactpost"},
			{"x", "/api/users", "GET", "api"},
			{"x", "/api/users/42", "GET", "relong"},
			{"x", "/api/users/42/x", "GET", "relong"},
			{"x", "/api/users/x", "GET", "api"},
			{"x", "/api/users/4" + strings.Repeat("2", MaxRegexPathBytes), "GET", "api"},
			{"x", "/other", "GET", "prefix"},
			{"h.example.com", "/api/health", "GET", "hosted"},
		} {
			r := tbl.Match(c.host, c.path, c.method)
			if r == nil || r.Target != c.want {
				got := "<nil>"
				if r != nil {
					got = r.Target
				}
				t.Errorf("index %d: %s %s %s: %s, want %s", n, c.method, c.host, c.path[:min(len(c.path), 40)], got, c.want)
			}
		}
		if p := tbl.Match("x", "/api/health", "GET").Pattern(); p != "/api/health" {
			t.Errorf("Pattern() = %q", p)
		}
	}
}

// TestPathKindErrors: one matcher per definition; a path must be a valid
// prefix would; a regex must compile, within its bounds; duplicates of
// each kind are refused, different kinds are not duplicates.
func TestPathKindErrors(t *testing.T) {
	for _, c := range []struct {
		defs []Definition
		want string
	}{
		{[]Definition{{Upstream: "a", PathPrefix: "/a", Path: "/a"}}, "only one of"},
		{[]Definition{{Upstream: "a", Path: "/a", PathRegex: "/a"}}, "only one of"},
		{[]Definition{{Upstream: "a", Path: "a"}}, `path "a"`},
		{[]Definition{{Upstream: "a", PathRegex: "/a("}}, "missing closing )"},
		{[]Definition{{Upstream: "a", PathRegex: `(a+)\1`}}, "invalid escape"},
		{[]Definition{{Upstream: "a", PathRegex: strings.Repeat("a", MaxRegexBytes+1)}}, "more than 1024"},
		{[]Definition{{Upstream: "a", PathRegex: "(a{0,100}){0,100}"}}, ""},
		{[]Definition{{Upstream: "a", Path: "/a"}, {Upstream: "b", Path: "/a"}}, "same route"},
		{[]Definition{{Upstream: "a", PathRegex: "/a"}, {Upstream: "b", PathRegex: "/a"}}, "same route"},
	} {
		targets := map[string]int{"a": 1, "b": 2}
		_, err := Build(c.defs, targets)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.defs, err, c.want)
		}
	}
	if _, err := Build([]Definition{{Upstream: "a", PathPrefix: "/a"}, {Upstream: "a", Path: "/a"}, {Upstream: "a", PathRegex: "/a"}}, map[string]int{"a": 1}); err != nil {
		t.Errorf("one path of each kind: %v", err)
	}
}

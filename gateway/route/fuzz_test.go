package route

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/impulse-agent/impulse-agent/internal/edgerules"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// FuzzMatch builds a table from fuzzed definitions (one per line:
// host TAB path TAB comma-separated methods, the path a path_prefix, or
// "=" and an exact path, or "~" and a path_regex) and matches a fuzzed
// request against it, checking Build and Match against refMatch, a
// brute-force matcher written from the documentation alone: the candidates
// are every definition whose host, prefix and methods accept the request;
// the winner is the first in the documented order. Build must fail exactly
// when a definition is invalid or duplicates another.
func FuzzMatch(f *testing.F) {
	f.Add("web.example.com\t/\t\n*.example.com\t/api\tGET,post\n\t/api/\t\n\t/\t", "web.example.com:443", "/api/x", "GET")
	f.Add("*.example.com\t/a\t\n*.b.example.com\t/\t\nA.B.example.com.\t/a/b\tPUT", "a.b.example.COM.", "/a/b", "PUT")
	f.Add("\t/a\tget\n\t/a\tGET,get\n", "x", "/a", "GET")
	f.Add("x*y\t/\t", "x", "/", "GET")
	f.Add("\t/%7Eu\t\n\t/~u/\t", "h", "/~u/x", "DELETE")
	f.Add("[::1]\t/\t\n*.\t/\t\n.\t/\t", "[::1]:8443", "/", "GET")
	f.Add("\t/a/../b\t\n\t/a%2Fb\t\n\t/a\\\\b\t", "h", "/a%2Fb", "GET")
	f.Add("\t/api/\t\n\t=/api/health\t\n\t~/api/[a-z]+\tGET\n\t~/api/.*\t\nh\t/\t", "h", "/api/health", "GET")
	f.Add("\t=/a\t\n\t=/a\tPUT\n\t~(\t\n", "x", "/a", "PUT")
	f.Fuzz(func(t *testing.T, spec, host, path, method string) {
		var defs []Definition
		targets := map[string]int{}
		for i, line := range strings.Split(spec, "\n") {
			if i == 16 {
				break
			}
			h, rest, _ := strings.Cut(line, "\t")
			prefix, methods, _ := strings.Cut(rest, "\t")
			d := Definition{Upstream: fmt.Sprintf("u%d", i%3), Host: h, PathPrefix: prefix, Index: i}
			if p, ok := strings.CutPrefix(prefix, "="); ok {
				d.PathPrefix, d.Path = "", p
			} else if p, ok := strings.CutPrefix(prefix, "~"); ok && p != "" {
				d.PathPrefix, d.PathRegex = "", p
			}
			if methods != "" {
				d.Methods = strings.Split(methods, ",")
			}
			defs = append(defs, d)
			targets[d.Upstream] = i % 3
		}
		tbl, err := Build(defs, targets)
		refs, why := refCompile(defs)
		if (err != nil) != (why != "") {
			t.Fatalf("Build error %v, reference %q, for %+v", err, why, defs)
		}
		if err != nil {
			return
		}
		ordered := tbl.Routes()
		if !slices.IsSortedFunc(ordered, func(a, b *Route[int]) int { return refOrder(refOf(refs, a), refOf(refs, b)) }) {
			t.Fatalf("Routes() not in the documented order: %v", ordered)
		}
		ids := map[string]bool{}
		for _, r := range ordered {
			if ids[r.ID] {
				t.Fatalf("duplicate route ID %q", r.ID)
			}
			ids[r.ID] = true
		}
		norm, err := pathnorm.NormalizePath(path, pathnorm.PathOptions{EscapedSlashes: pathnorm.EscapedSlashesKeep})
		if err != nil {
			return // Match takes normal forms only: the gateway answers 400 first
		}
		want := refMatch(refs, host, norm, method)
		// Every list of routes scanned, then every one indexed by path
		// prefix (pathIndex), as the lists of a large table are.
		indexed := withPathIndexMin(1, func() *Table[int] {
			tbl, err := Build(defs, targets)
			if err != nil {
				t.Fatal(err)
			}
			return tbl
		})
		for name, tbl := range map[string]*Table[int]{"scanned": tbl, "indexed": indexed} {
			got := tbl.Match(host, norm, method)
			switch {
			case got == nil && want == nil:
			case got == nil || want == nil || got.Upstream != want.Upstream || got.Index != want.Index:
				t.Fatalf("Match(%q, %q, %q) = %v (%s), reference %v\ndefinitions %+v", host, norm, method, got, name, want, defs)
			}
		}
	})
}

// withPathIndexMin runs build with pathIndexMin set to n.
func withPathIndexMin[R any](n int, build func() R) R {
	old := pathIndexMin
	pathIndexMin = n
	defer func() { pathIndexMin = old }()
	return build()
}

// refRoute is a definition as the reference understands it.
type refRoute struct {
	Definition
	host     string // lower-case, no trailing dot; "*.x" kept as is
	kind     int    // 0 exact, 1 wildcard, 2 any
	suffix   string // wildcard: ".x"
	prefix   string // normal form
	methods  []string
	pathKind int            // 0 exact, 1 regex, 2 prefix
	exact    string         // normal form
	re       *regexp.Regexp // anchored
}

// refCompile checks and prepares defs; why is non-empty when Build must
// refuse them.
func refCompile(defs []Definition) (refs []refRoute, why string) {
	keys := map[string]bool{}
	for _, d := range defs {
		r := refRoute{Definition: d, pathKind: 2, host: strings.TrimSuffix(refLower(d.Host), ".")}
		switch {
		case d.PathRegex != "":
			// The bounds are edgerules' to define: its verdict is the spec.
			if _, err := edgerules.CompilePathRegex(d.PathRegex); err != nil {
				return nil, "regex"
			}
			r.pathKind, r.re = 1, regexp.MustCompile("^(?:"+d.PathRegex+")$")
		default:
			p := d.PathPrefix
			if d.Path != "" {
				p = d.Path
			}
			if !strings.HasPrefix(p, "/") {
				return nil, "path without /"
			}
			norm, err := pathnorm.NormalizePath(p, pathnorm.PathOptions{EscapedSlashes: pathnorm.EscapedSlashesKeep})
			if err != nil || strings.Count(norm, "/") != strings.Count(p, "/") {
				return nil, "path does not normalise segment for segment"
			}
			if d.Path != "" {
				r.pathKind, r.exact = 0, norm
			} else {
				r.prefix = norm
			}
		}
		switch {
		case r.host == "":
			r.kind = 2
		case strings.HasPrefix(r.host, "*.") && !strings.Contains(r.host[1:], "*"):
			r.kind, r.suffix = 1, r.host[1:]
		case strings.Contains(r.host, "*"):
			return nil, "misplaced *"
		}
		for _, m := range d.Methods {
			if m = strings.ToUpper(m); !slices.Contains(r.methods, m) {
				r.methods = append(r.methods, m)
			}
		}
		slices.Sort(r.methods)
		key := fmt.Sprint(r.kind, r.host, "|", r.pathKind, r.prefix, r.exact, d.PathRegex, "|", r.methods)
		if keys[key] {
			return nil, "duplicate"
		}
		keys[key] = true
		refs = append(refs, r)
	}
	return refs, ""
}

// refOf finds the reference entry of a compiled route.
func refOf(refs []refRoute, r *Route[int]) refRoute {
	for _, x := range refs {
		if x.Upstream == r.Upstream && x.Index == r.Index {
			return x
		}
	}
	panic("route not in the reference")
}

// refOrder is the documented order: exact hosts, then wildcards by
// longer suffix, then any host; then exact paths, regular expressions
// (longer first) and path prefixes (longer first); then routes with
// methods; then upstream name and index.
func refOrder(a, b refRoute) int {
	if c := cmp.Compare(a.kind, b.kind); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.host), len(a.host)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.host, b.host); c != 0 {
		return c
	}
	// exact paths, then regular expressions (longer first), then prefixes
	if c := cmp.Compare(a.pathKind, b.pathKind); c != 0 {
		return c
	}
	if c := cmp.Compare(a.exact, b.exact); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.PathRegex), len(a.PathRegex)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.PathRegex, b.PathRegex); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.prefix), len(a.prefix)); c != 0 {
		return c
	}
	if am, bm := len(a.methods) > 0, len(b.methods) > 0; am != bm {
		if am {
			return -1
		}
		return 1
	}
	if c := cmp.Compare(a.Upstream, b.Upstream); c != 0 {
		return c
	}
	return cmp.Compare(a.Index, b.Index)
}

// refMatch returns the first route, in refOrder, that accepts the request.
func refMatch(refs []refRoute, host, path, method string) *refRoute {
	if i := strings.LastIndex(host, ":"); i >= 0 && !strings.HasSuffix(host, "]") {
		host = host[:i]
	}
	host = refLower(strings.TrimSuffix(host, "."))
	var best *refRoute
	for i := range refs {
		r := &refs[i]
		switch r.kind {
		case 0:
			if host != r.host {
				continue
			}
		case 1: // a name that ends in the suffix, with something before it
			if !strings.HasSuffix(host, r.suffix) || len(host) == len(r.suffix) {
				continue
			}
		}
		var under bool
		switch r.pathKind {
		case 0:
			under = path == r.exact
		case 1:
			under = len(path) <= 1024 && r.re.MatchString(path)
		default:
			under = path == r.prefix || strings.HasPrefix(path, r.prefix) && (strings.HasSuffix(r.prefix, "/") || path[len(r.prefix)] == '/')
		}
		if !under || len(r.methods) > 0 && !slices.Contains(r.methods, method) {
			continue
		}
		if best == nil || refOrder(*r, *best) < 0 {
			best = r
		}
	}
	return best
}

// refLower folds ASCII letters only: host names compare case-insensitively
// in ASCII (RFC 4343 §3); other bytes are data.
func refLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func (r *refRoute) String() string { return fmt.Sprintf("%s#%d", r.Upstream, r.Index) }

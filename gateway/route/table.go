// Package route holds the gateway's immutable route table: a pure builder
// turns route definitions into a Table, and Match finds the most specific
// route for a request's host, path and method without allocating.
package route

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Definition is one route as configured: which requests it matches and the
// upstream they go to.
type Definition struct {
	// Upstream is the name of the upstream that serves matching requests.
	Upstream string
	// Host is an exact host ("web.example.com"), a wildcard ("*.example.com",
	// matching any name that ends in ".example.com", one or more labels), or
	// empty for any host. Compared case-insensitively, without port.
	Host string
	// PathPrefix matches whole path segments: "/api" matches "/api" and
	// "/api/x" but not "/apix"; a prefix ending in "/" matches any path that
	// starts with it. Must start with "/". It is compared in its normal form
	// (pathnorm.NormalizePath, escaped slashes kept) with the request's normalised
	// path: "/%7Eu" and "/~u" are the same prefix.
	PathPrefix string
	// Path matches exactly one path, compared in its normal form as
	// PathPrefix is; PathRegex matches the paths an RE2 regular expression
	// matches whole (anchored at both ends), against the normalised path
	// in its escaped form, paths longer than MaxRegexPathBytes never (paths.go).
	// A definition sets one of PathPrefix, Path and PathRegex. Within one
	// host (or suffix, or any host), an exact path is tried first, then the
	// regular expressions (longer first), then the prefixes (longer first).
	Path, PathRegex string
	// Methods restricts the route to these methods; empty means any.
	Methods []string
	// Upgrades lists the protocols (HTTP/1.1 Upgrade tokens, extended
	// CONNECT :protocol values) the route lets through as tunnels; nil
	// means the caller's default. Not used for matching.
	Upgrades []string
	// Index is the route's position within its upstream's definition, used
	// only for the deterministic tie-break and for reporting.
	Index int
}

// Route is a compiled Definition. Target is whatever the caller attached to
// the upstream name (the gateway's runtime upstream); the table never looks
// inside it.
type Route[T any] struct {
	Definition
	Target T
	// ID identifies the route by what it matches (host, path prefix,
	// methods): unique within a Table, and the same in every Build for the
	// same definition (the rate limit's "route" key, whichever upstream).
	ID     string
	host   string // lower-cased; for wildcards the suffix including the dot
	kind   hostKind
	prefix string
	path   pathMatcher // paths.go
}

type hostKind uint8

const (
	hostExact hostKind = iota
	hostWildcard
	hostAny
)

// Table is an immutable, ordered set of routes. It is safe for concurrent
// use and is never modified after Build returns.
type Table[T any] struct {
	exact    map[string]routeList[T] // by host
	wildcard map[string]routeList[T] // by suffix, e.g. ".example.com"
	any      routeList[T]
	ordered  []*Route[T] // match order, for reporting
}

// routeList is the routes of one host (or suffix, or of any host) in match
// order: by longer path prefix first, so the first route that accepts a
// request is the most specific one.
type routeList[T any] struct {
	routes []*Route[T]
	// index finds the same first route without visiting every route;
	// nil for lists shorter than pathIndexMin, which are scanned.
	index *pathIndex[T]
}

// pathIndexMin is the length from which a list of routes is indexed by
// path prefix; shorter ones are faster to scan. A variable for the tests.
var pathIndexMin = 8

// pathIndex is a routeList by path prefix. Of the routes a path is under,
// the list's order puts those with the longest prefix first, and only one
// prefix of each length can be a prefix of the path: looking up the path's
// own prefixes, longest first, finds the list's first match.
type pathIndex[T any] struct {
	// byPrefix holds each prefix's routes, in the list's order.
	byPrefix map[string][]*Route[T]
	// lengths[n] reports whether a prefix has n bytes: most of the path's
	// prefixes are never looked up.
	lengths []bool
	// exact holds the exact-path routes by path, regex the path_regex
	// routes, each in the list's order (tried before the prefixes).
	exact map[string][]*Route[T]
	regex []*Route[T]
}

func newPathIndex[T any](l []*Route[T]) *pathIndex[T] {
	x := &pathIndex[T]{byPrefix: map[string][]*Route[T]{}}
	for _, r := range l {
		switch r.path.kind {
		case pathExact:
			if x.exact == nil {
				x.exact = map[string][]*Route[T]{}
			}
			x.exact[r.path.exact] = append(x.exact[r.path.exact], r)
			continue
		case pathRegex:
			x.regex = append(x.regex, r)
			continue
		}
		x.byPrefix[r.prefix] = append(x.byPrefix[r.prefix], r)
		if n := len(r.prefix); n >= len(x.lengths) {
			x.lengths = append(x.lengths, make([]bool, n+1-len(x.lengths))...)
		}
		x.lengths[len(r.prefix)] = true
	}
	return x
}

// match is matchList over the indexed list: for each prefix path[:k]
// under which path lies (k = len(path), or a "/" ends path[:k] or follows
// it), longest first, the first of its routes that accepts method.
func (x *pathIndex[T]) match(path, method string) *Route[T] {
	if len(x.exact) > 0 {
		if l, ok := x.exact[path]; ok {
			if r := scanList(l, path, method); r != nil {
				return r
			}
		}
	}
	if len(x.regex) > 0 {
		if r := scanList(x.regex, path, method); r != nil {
			return r
		}
	}
	if len(x.lengths) == 0 {
		return nil
	}
	for k := min(len(path), len(x.lengths)-1); k > 0; k-- {
		if !x.lengths[k] || (k < len(path) && path[k-1] != '/' && path[k] != '/') {
			continue
		}
		if l, ok := x.byPrefix[path[:k]]; ok {
			if r := scanList(l, path, method); r != nil {
				return r
			}
		}
	}
	return nil
}

// Build compiles definitions into a Table. targets maps an upstream name to
// its runtime value; a definition naming an unknown upstream is an error.
// Routes are ordered by host specificity (exact, then longer wildcard suffix,
// then any host), then by path kind (exact path, then path_regex, longer
// pattern first, then path_prefix), then by longer path prefix, then routes with methods before
// routes without, then upstream name and index: the first match in that order
// wins (the tie-break is deterministic).
func Build[T any](defs []Definition, targets map[string]T) (*Table[T], error) {
	t := &Table[T]{ordered: make([]*Route[T], len(defs))}
	routes := make([]Route[T], len(defs)) // one allocation for all
	seen := make(map[string]string, len(defs))
	for i, d := range defs {
		target, ok := targets[d.Upstream]
		if !ok {
			return nil, fmt.Errorf("route: upstream %q is not defined", d.Upstream)
		}
		pm, err := compilePath(d)
		if err != nil {
			return nil, err
		}
		r := &routes[i]
		*r = Route[T]{Definition: d, Target: target, prefix: pm.prefix, path: pm}
		// ASCII case only, as Match folds it: strings.ToLower would turn
		// "\xb0" into U+FFFD and the Kelvin sign into "k" (FuzzMatch).
		h := strings.TrimSuffix(lowerASCII(d.Host), ".")
		switch {
		case h == "":
			r.kind = hostAny
		case strings.HasPrefix(h, "*.") && !strings.Contains(h[2:], "*"): // "*.*" too was taken (FuzzMatch)
			r.kind, r.host = hostWildcard, h[1:]
		case strings.Contains(h, "*"):
			return nil, fmt.Errorf("route: upstream %q: host %q: only a leading \"*.\" wildcard is allowed", d.Upstream, d.Host)
		default:
			r.kind, r.host = hostExact, h
		}
		var methods []string
		if len(d.Methods) > 0 {
			methods = make([]string, len(d.Methods))
			for i, m := range d.Methods {
				methods[i] = strings.ToUpper(m)
			}
			sort.Strings(methods)
			methods = slices.Compact(methods)
		}
		r.Methods = methods
		key := strconv.Itoa(int(r.kind)) + "|" + r.host + "|" + pm.key() + "|" + strings.Join(methods, ",")
		if other, dup := seen[key]; dup {
			return nil, fmt.Errorf("route: upstreams %q and %q declare the same route (host %q, %s)", other, d.Upstream, d.Host, pm.describe())
		}
		seen[key] = d.Upstream
		r.ID = key
		t.ordered[i] = r
	}
	sortRoutes(t.ordered)
	// The routes of one host (or suffix, or any host) follow each other in
	// match order: each list is a run of t.ordered.
	t.exact, t.wildcard = make(map[string]routeList[T], len(defs)), map[string]routeList[T]{}
	for i, j := 0, 0; i < len(t.ordered); i = j {
		r := t.ordered[i]
		for j = i + 1; j < len(t.ordered) && t.ordered[j].kind == r.kind && t.ordered[j].host == r.host; j++ {
		}
		l := newRouteList(t.ordered[i:j:j])
		switch r.kind {
		case hostExact:
			t.exact[r.host] = l
		case hostWildcard:
			t.wildcard[r.host] = l
		default:
			t.any = l
		}
	}
	return t, nil
}

// newRouteList is l, in match order, indexed when it is long.
func newRouteList[T any](l []*Route[T]) routeList[T] {
	rl := routeList[T]{routes: l}
	if len(l) >= pathIndexMin {
		rl.index = newPathIndex(l)
	}
	return rl
}

func sortRoutes[T any](l []*Route[T]) {
	slices.SortStableFunc(l, func(a, b *Route[T]) int {
		if a.kind != b.kind {
			return cmp.Compare(a.kind, b.kind)
		}
		if len(a.host) != len(b.host) {
			return cmp.Compare(len(b.host), len(a.host))
		}
		if a.host != b.host {
			return strings.Compare(a.host, b.host)
		}
		if c := comparePaths(&a.path, &b.path); c != 0 {
			return c
		}
		if len(a.prefix) != len(b.prefix) {
			return cmp.Compare(len(b.prefix), len(a.prefix))
		}
		if am, bm := len(a.Methods) > 0, len(b.Methods) > 0; am != bm {
			if am {
				return -1
			}
			return 1
		}
		if a.Upstream != b.Upstream {
			return strings.Compare(a.Upstream, b.Upstream)
		}
		return cmp.Compare(a.Index, b.Index)
	})
}

// Routes returns the routes in match order. The slice must not be modified.
func (t *Table[T]) Routes() []*Route[T] { return t.ordered }

// Match returns the most specific route for host (an :authority or Host
// value, port allowed), path and method, or nil when none matches. path must
// be in normal form (pathnorm.NormalizePath): the gateway matches what it forwards.
// It does not allocate for lower-case hosts.
func (t *Table[T]) Match(host, path, method string) *Route[T] {
	host = normalizeHost(host)
	if l, ok := t.exact[host]; ok {
		if r := matchList(l, path, method); r != nil {
			return r
		}
	}
	if len(t.wildcard) > 0 {
		// Longest suffix first: for a.b.example.com try .b.example.com, .example.com, .com.
		for i := 1; i < len(host); i++ {
			if host[i] != '.' {
				continue
			}
			if l, ok := t.wildcard[host[i:]]; ok {
				if r := matchList(l, path, method); r != nil {
					return r
				}
			}
		}
	}
	return matchList(t.any, path, method)
}

func matchList[T any](l routeList[T], path, method string) *Route[T] {
	if l.index != nil {
		return l.index.match(path, method)
	}
	return scanList(l.routes, path, method)
}

// scanList returns the first route of l that accepts path and method.
func scanList[T any](l []*Route[T], path, method string) *Route[T] {
	for _, r := range l {
		if !r.path.match(path) {
			continue
		}
		if len(r.Methods) > 0 && !containsMethod(r.Methods, method) {
			continue
		}
		return r
	}
	return nil
}

func prefixMatch(prefix, path string) bool {
	if !strings.HasPrefix(path, prefix) {
		return false
	}
	if len(path) == len(prefix) || prefix[len(prefix)-1] == '/' {
		return true
	}
	return path[len(prefix)] == '/'
}

func containsMethod(methods []string, m string) bool {
	for _, x := range methods {
		if x == m {
			return true
		}
	}
	return false
}

// normalizeHost strips a port and a trailing dot and lower-cases the host,
// allocating only when the host has upper-case letters.
func normalizeHost(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.HasSuffix(h, "]") {
		h = h[:i]
	}
	return lowerASCII(strings.TrimSuffix(h, "."))
}

// lowerASCII lower-cases the ASCII letters of h (host names compare
// case-insensitively in ASCII only, RFC 4343 §3), allocating only when h
// has upper-case letters; other bytes stay as they are.
func lowerASCII(h string) string {
	for i := 0; i < len(h); i++ {
		if c := h[i]; 'A' <= c && c <= 'Z' {
			b := []byte(h)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return h
}

// ValidMethod reports whether m is a syntactically valid method token
// (RFC 9110 §9.1).
func ValidMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		if !isTokenChar(m[i]) {
			return false
		}
	}
	return true
}

func isTokenChar(c byte) bool {
	return c < 127 && c > ' ' && !strings.ContainsRune("\"(),/:;<=>?@[\\]{}", rune(c))
}

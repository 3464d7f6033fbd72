// Package route holds the gateway's immutable route table: a pure builder
// turns route definitions into a Table, and Match finds the most specific
// route for a request's host, path and method without allocating.
package route

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
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
	exact    map[string][]*Route[T] // by host
	wildcard map[string][]*Route[T] // by suffix, e.g. ".example.com"
	any      []*Route[T]
	ordered  []*Route[T] // match order, for reporting
}

// Build compiles definitions into a Table. targets maps an upstream name to
// its runtime value; a definition naming an unknown upstream is an error.
// Routes are ordered by host specificity (exact, then longer wildcard suffix,
// then any host), then by longer path prefix, then routes with methods before
// routes without, then upstream name and index: the first match in that order
// wins (the tie-break is deterministic).
func Build[T any](defs []Definition, targets map[string]T) (*Table[T], error) {
	t := &Table[T]{exact: map[string][]*Route[T]{}, wildcard: map[string][]*Route[T]{}}
	seen := map[string]string{}
	for _, d := range defs {
		target, ok := targets[d.Upstream]
		if !ok {
			return nil, fmt.Errorf("route: upstream %q is not defined", d.Upstream)
		}
		if err := pathnorm.CheckPrefix(d.PathPrefix); err != nil {
			return nil, fmt.Errorf("route: upstream %q: path_prefix %q: %w", d.Upstream, d.PathPrefix, err)
		}
		prefix, _ := pathnorm.NormalizePath(d.PathPrefix, pathnorm.PathOptions{EscapedSlashes: pathnorm.EscapedSlashesKeep})
		r := &Route[T]{Definition: d, Target: target, prefix: prefix}
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
		methods := append([]string(nil), d.Methods...)
		for i, m := range methods {
			methods[i] = strings.ToUpper(m)
		}
		sort.Strings(methods)
		methods = slices.Compact(methods)
		r.Methods = methods
		key := fmt.Sprintf("%d|%s|%s|%s", r.kind, r.host, r.prefix, strings.Join(methods, ","))
		if other, dup := seen[key]; dup {
			return nil, fmt.Errorf("route: upstreams %q and %q declare the same route (host %q, path_prefix %q)", other, d.Upstream, d.Host, d.PathPrefix)
		}
		seen[key] = d.Upstream
		r.ID = key
		switch r.kind {
		case hostExact:
			t.exact[r.host] = append(t.exact[r.host], r)
		case hostWildcard:
			t.wildcard[r.host] = append(t.wildcard[r.host], r)
		default:
			t.any = append(t.any, r)
		}
		t.ordered = append(t.ordered, r)
	}
	for _, l := range t.exact {
		sortRoutes(l)
	}
	for _, l := range t.wildcard {
		sortRoutes(l)
	}
	sortRoutes(t.any)
	sortRoutes(t.ordered)
	return t, nil
}

func sortRoutes[T any](l []*Route[T]) {
	sort.SliceStable(l, func(i, j int) bool {
		a, b := l[i], l[j]
		if a.kind != b.kind {
			return a.kind < b.kind
		}
		if len(a.host) != len(b.host) {
			return len(a.host) > len(b.host)
		}
		if a.host != b.host {
			return a.host < b.host
		}
		if len(a.prefix) != len(b.prefix) {
			return len(a.prefix) > len(b.prefix)
		}
		if (len(a.Methods) > 0) != (len(b.Methods) > 0) {
			return len(a.Methods) > 0
		}
		if a.Upstream != b.Upstream {
			return a.Upstream < b.Upstream
		}
		return a.Index < b.Index
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

func matchList[T any](l []*Route[T], path, method string) *Route[T] {
	for _, r := range l {
		if !prefixMatch(r.prefix, path) {
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

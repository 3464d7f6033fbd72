package route

import (
	"cmp"
	"fmt"
	"regexp"
	"strings"

	"github.com/impulse-agent/impulse-agent/internal/edgerules"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// Bounds of a path_regex route (edgerules.CompilePathRegex, README "Path
// matching"): a path longer than MaxRegexPathBytes never matches one.
const (
	MaxRegexPathBytes = edgerules.MaxRegexPathBytes
	MaxRegexBytes     = edgerules.MaxRegexBytes
	MaxRegexInsts     = edgerules.MaxRegexInsts
)

// pathKind is how a route matches paths, in match order.
type pathKind uint8

const (
	pathExact pathKind = iota
	pathRegex
	pathPrefix
)

// pathMatcher is a route's compiled path match.
type pathMatcher struct {
	kind   pathKind
	prefix string         // pathPrefix: normalised
	exact  string         // pathExact: normalised
	re     *regexp.Regexp // pathRegex: anchored
	source string         // pathRegex: as written
}

// compilePath compiles d's PathPrefix, Path or PathRegex (exactly one).
// Errors name the upstream and the field.
func compilePath(d Definition) (pathMatcher, error) {
	n := 0
	for _, s := range []string{d.PathPrefix, d.Path, d.PathRegex} {
		if s != "" {
			n++
		}
	}
	keep := pathnorm.PathOptions{EscapedSlashes: pathnorm.EscapedSlashesKeep}
	switch {
	case n > 1:
		return pathMatcher{}, fmt.Errorf("route: upstream %q: only one of path_prefix, path and path_regex may be set", d.Upstream)
	case d.Path != "":
		if err := pathnorm.CheckPrefix(d.Path); err != nil {
			return pathMatcher{}, fmt.Errorf("route: upstream %q: path %q: %w", d.Upstream, d.Path, err)
		}
		p, _ := pathnorm.NormalizePath(d.Path, keep)
		return pathMatcher{kind: pathExact, exact: p}, nil
	case d.PathRegex != "":
		re, err := edgerules.CompilePathRegex(d.PathRegex)
		if err != nil {
			return pathMatcher{}, fmt.Errorf("route: upstream %q: path_regex: %w", d.Upstream, err)
		}
		return pathMatcher{kind: pathRegex, re: re, source: d.PathRegex}, nil
	}
	if err := pathnorm.CheckPrefix(d.PathPrefix); err != nil {
		return pathMatcher{}, fmt.Errorf("route: upstream %q: path_prefix %q: %w", d.Upstream, d.PathPrefix, err)
	}
	p, _ := pathnorm.NormalizePath(d.PathPrefix, keep)
	return pathMatcher{kind: pathPrefix, prefix: p}, nil
}

// match reports whether the normalised path p is the route's.
func (m *pathMatcher) match(p string) bool {
	switch m.kind {
	case pathPrefix:
		return prefixMatch(m.prefix, p)
	case pathExact:
		return p == m.exact
	}
	return len(p) <= MaxRegexPathBytes && m.re.MatchString(p)
}

// key is the matcher in a route's ID: the prefix as before, "=" and the
// exact path, "~" and the pattern.
func (m *pathMatcher) key() string {
	switch m.kind {
	case pathExact:
		return "=" + m.exact
	case pathRegex:
		return "~" + m.source
	}
	return m.prefix
}

// describe names the matcher in an error.
func (m *pathMatcher) describe() string {
	switch m.kind {
	case pathExact:
		return fmt.Sprintf("path %q", m.exact)
	case pathRegex:
		return fmt.Sprintf("path_regex %q", m.source)
	}
	return fmt.Sprintf("path_prefix %q", m.prefix)
}

// comparePaths orders two matchers of one host: exact paths, then
// regular expressions (longer pattern first, then by pattern), then
// prefixes (compared by the caller).
func comparePaths(a, b *pathMatcher) int {
	if a.kind != b.kind {
		return cmp.Compare(a.kind, b.kind)
	}
	switch a.kind {
	case pathExact:
		return strings.Compare(a.exact, b.exact)
	case pathRegex:
		if len(a.source) != len(b.source) {
			return cmp.Compare(len(b.source), len(a.source))
		}
		return strings.Compare(a.source, b.source)
	}
	return 0
}

// Pattern is what the route matches paths by, as configured: its
// path_prefix, path or path_regex (the route label of metrics and the
// access log).
func (r *Route[T]) Pattern() string {
	switch r.path.kind {
	case pathExact:
		return r.Path
	case pathRegex:
		return r.PathRegex
	}
	return r.PathPrefix
}

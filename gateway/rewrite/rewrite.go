// Package rewrite holds a route's path rewrite (strip_prefix,
// prefix_rewrite) and its redirect: small policies with pure functions
// of the normalised request path, table- and fuzz-tested without a
// network (README "Path rewrites", "Redirects").
package rewrite

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/impulse-agent/impulse-agent/internal/edgerules"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// Config is a route's path rewrite. The zero value changes nothing.
type Config struct {
	// StripPrefix removes the route's path prefix: "/api/" (or "/api")
	// forwards "/api/users" as "/users" and "/api" as "/".
	StripPrefix bool
	// PrefixRewrite replaces the route's path prefix: "/v1/" with
	// "/internal/v1/" forwards "/v1/a" as "/internal/v1/a". A path in
	// normal form (edgerules.CheckRewrite); "" means none. Exclusive with
	// StripPrefix (which is PrefixRewrite "/").
	PrefixRewrite string
}

// Rule is a compiled Config for one route's prefix.
type Rule struct {
	prefix  string // the route's normalised prefix without its trailing "/"
	replace string // what replaces it, without a trailing "/"
}

// New compiles c for a route whose normalised path_prefix is prefix (as
// the route table matches it). nil, nil when c changes nothing. Errors:
// both set, or a prefix_rewrite not in normal form.
func New(c Config, prefix string) (*Rule, error) {
	switch {
	case c.StripPrefix && c.PrefixRewrite != "":
		return nil, errors.New("rewrite: strip_prefix and prefix_rewrite are exclusive")
	case c.StripPrefix:
		return &Rule{prefix: strings.TrimSuffix(prefix, "/")}, nil
	case c.PrefixRewrite != "":
		if why := edgerules.CheckRewrite(c.PrefixRewrite); why != "" {
			return nil, fmt.Errorf("rewrite: prefix_rewrite: %s", why)
		}
		return &Rule{prefix: strings.TrimSuffix(prefix, "/"), replace: strings.TrimSuffix(c.PrefixRewrite, "/")}, nil
	}
	return nil, nil
}

// Apply returns the path forwarded for path, the normalised path (escaped
// form) the route matched: the prefix replaced; "" becomes "/". The
// result is in normal form when path is (FuzzRewrite): the rest of path
// after the prefix starts at a segment boundary and the replacement is in
// normal form. ok is false when path is not under the prefix (not the
// route's) or the result would not be in normal form, which FuzzRewrite
// shows never happens for a path the table routed here.
func (r *Rule) Apply(path string) (out string, ok bool) {
	return replacePrefix(path, r.prefix, r.replace)
}

// replacePrefix is path with prefix (no trailing "/") replaced by with
// (no trailing "/"), "/" when that is empty; ok false when path does not
// start with prefix at a segment boundary or the result is not in normal
// form.
func replacePrefix(path, prefix, with string) (string, bool) {
	if !strings.HasPrefix(path, prefix) {
		return "", false
	}
	rest := path[len(prefix):]
	if rest != "" && rest[0] != '/' {
		return "", false
	}
	out := with + rest
	switch {
	case out == "":
		return "/", true
	case with == "":
		out = rest // no allocation
	}
	if n, err := pathnorm.NormalizePath(out, pathnorm.PathOptions{EscapedSlashes: pathnorm.EscapedSlashesKeep}); err != nil || n != out {
		return "", false
	}
	return out, true
}

// PathAndEscaped is a rewritten path as url.URL holds it: Path decoded
// and RawPath the escaped form when they differ.
func PathAndEscaped(escaped string) (path, raw string) {
	if strings.IndexByte(escaped, '%') < 0 {
		return escaped, ""
	}
	p, err := url.PathUnescape(escaped)
	if err != nil { // unreachable: a normal-form path has valid escapes
		return escaped, ""
	}
	return p, escaped
}

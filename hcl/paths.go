package hcl

import (
	"fmt"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Path normalisation settings: top-level arguments named as Envoy's
// HttpConnectionManager names them (normalize_path, merge_slashes,
// path_with_escaped_slashes_action). Routing always uses the normalised path;
// these choose what is forwarded and how "//", "%2F" and "%5C" are read.

const (
	// DefaultNormalizePath is normalize_path when absent: forward the
	// normalised path.
	DefaultNormalizePath = true
	// DefaultMergeSlashes is merge_slashes when absent: "//" is kept.
	DefaultMergeSlashes = false
	// DefaultEscapedSlashes is escaped_slashes when absent: a request whose
	// path holds "%2F", "%5C" or "\" is refused (400 invalid_path).
	DefaultEscapedSlashes = "reject"
)

// escapedSlashes are the accepted escaped_slashes values.
var escapedSlashes = []string{"reject", "keep", "unescape"}

// Paths are the top-level path normalisation settings (README "Routing").
type Paths struct {
	// NormalizePath forwards the normalised path (default true); false
	// forwards the path as sent. Routing uses the normalised path either way.
	NormalizePath bool
	// MergeSlashes collapses "//" into "/" for routing and forwarding
	// (default false).
	MergeSlashes bool
	// EscapedSlashes is "reject" (default), "keep" or "unescape".
	EscapedSlashes string
}

// DefaultPaths returns the settings of a file without path arguments.
func DefaultPaths() Paths {
	return Paths{NormalizePath: DefaultNormalizePath, MergeSlashes: DefaultMergeSlashes, EscapedSlashes: DefaultEscapedSlashes}
}

// UnreachablePrefix returns why a route with path_prefix p can never match
// under the path settings ps, or "": a prefix holding an escaped slash or
// backslash ("%2F", "%5C") matches only with escaped_slashes = "keep", since
// "reject" refuses every request that could match it and "unescape" turns
// the request's escape into "/".
func UnreachablePrefix(p string, ps Paths) string {
	if ps.EscapedSlashes == "keep" {
		return ""
	}
	lp := strings.ToLower(p)
	if strings.Contains(lp, "%2f") || strings.Contains(lp, "%5c") {
		return fmt.Sprintf("path_prefix %q can never match: it holds an escaped slash or backslash, and escaped_slashes = %q %s (set escaped_slashes = \"keep\" to route it)",
			p, ps.EscapedSlashes, map[string]string{"reject": "refuses every request whose path holds one", "unescape": "turns it into \"/\" before matching"}[ps.EscapedSlashes])
	}
	return ""
}

// checkReachable reports the routes of c that can never match under its
// path settings, at each route block.
func checkReachable(top blk, c *Config) {
	for _, u := range c.Upstreams {
		for _, r := range u.Routes {
			if why := UnreachablePrefix(r.PathPrefix, c.Paths); why != "" {
				rng := r.Range
				top.add(hcl2.DiagError, &rng, "Unreachable route", fmt.Sprintf("upstream %q route: %s.", u.Name, why))
			}
		}
	}
}

// buildPaths reads the top-level path arguments of m.
func buildPaths(top blk, m *rawFile) Paths {
	return Paths{
		NormalizePath:  top.boolean(m.NormalizePath, DefaultNormalizePath),
		MergeSlashes:   top.boolean(m.MergeSlashes, DefaultMergeSlashes),
		EscapedSlashes: top.oneOf(m.EscapedSlashes, DefaultEscapedSlashes, escapedSlashes...),
	}
}

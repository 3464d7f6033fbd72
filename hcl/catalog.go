package hcl

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// buildCatalog converts consul.catalog.
func buildCatalog(b blk, r *rawCatalog) *Catalog {
	c := &Catalog{
		Enabled:       b.boolean(r.Enabled, true),
		TagPrefix:     DefaultCatalogTagPrefix,
		DefaultScheme: b.oneOf(r.DefaultScheme, DefaultCatalogScheme, "http", "https", "h2c"),
	}
	if p, ok := b.strOK(r.TagPrefix, DefaultCatalogTagPrefix); ok {
		if why := checkTagPrefix(p); why != "" {
			b.errorf(r.TagPrefix, "", "Invalid tag_prefix", "%s.", why)
		} else {
			c.TagPrefix = p
		}
	}
	if f, ok := b.strOK(r.Filter, ""); ok {
		switch {
		case strings.TrimSpace(f) == "" && f != "":
			b.errorf(r.Filter, "", "Invalid filter", "must not be blank; leave it out (or \"\") for no filter.")
		case strings.ContainsFunc(f, func(c rune) bool { return c < ' ' && c != '\t' && c != '\n' && c != '\r' || c == 0x7f }):
			b.errorf(r.Filter, "", "Invalid filter", "must not contain control characters.")
		default:
			c.Filter = strings.TrimSpace(f)
		}
	}
	return c
}

// checkTagPrefix returns why p is not a valid consul.catalog.tag_prefix, or "".
func checkTagPrefix(p string) string {
	if p == "" {
		return "must not be empty"
	}
	if p[0] == '.' || p[len(p)-1] == '.' {
		return fmt.Sprintf("must not start or end with \".\"; got %q (the \".\" before route, enable, scheme and lb is added)", p)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Sprintf("only letters, digits, \"-\", \"_\" and \".\" are allowed; got %q", p)
		}
	}
	return ""
}

// reserveCatalogNames reports every upstream block whose name starts with
// CatalogUpstreamPrefix: with the catalog mode on, those names belong to the
// upstreams made from Consul services.
func reserveCatalogNames(top blk, raws []*rawUpstream) {
	for _, r := range raws {
		if strings.HasPrefix(r.Name, CatalogUpstreamPrefix) {
			top.child(fmt.Sprintf("upstream %q", r.Name), r.DefRange).blockErrorf("Reserved upstream name",
				"names starting with %q are reserved for the upstreams consul.catalog makes from Consul services; rename the block.", CatalogUpstreamPrefix)
		}
	}
}

// ParseCatalogRoute parses a route declared in Consul (a "<prefix>.route="
// tag or the ServiceMeta "impulse-route"): "HOST/PATH", "/PATH" (any host) or
// "HOST" (path "/"). Everything from the first "/" is the path prefix. HOST
// follows the rules of route.host (exact, IP, or "*.suffix"; no port) and is
// lower-cased; PATH those of route.path_prefix and may not contain spaces or
// control characters. Surrounding spaces are ignored. Errors describe the
// problem for a log line or the control API.
func ParseCatalogRoute(s string) (Route, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Route{}, errors.New("empty route; use HOST/PATH, /PATH or HOST")
	}
	if strings.Contains(s, "://") {
		return Route{}, fmt.Errorf("%q: a route is HOST/PATH, /PATH or HOST, without a scheme", s)
	}
	host, path := s, DefaultPathPrefix
	if i := strings.IndexByte(s, '/'); i >= 0 {
		host, path = s[:i], s[i:]
	}
	norm, why := normalizeRouteHost(host)
	if why != "" {
		return Route{}, errors.New(why)
	}
	if why := checkPathPrefix(path); why != "" {
		return Route{}, fmt.Errorf("path %s", why)
	}
	if strings.ContainsFunc(path, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return Route{}, fmt.Errorf("path %q must not contain spaces or control characters", path)
	}
	return Route{Host: norm, PathPrefix: path}, nil
}

// LoadBalancingPolicies returns the accepted upstream.load_balancing values.
func LoadBalancingPolicies() []string { return slices.Clone(loadBalancingPolicies) }

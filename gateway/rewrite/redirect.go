package rewrite

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/impulse-agent/impulse-agent/internal/edgerules"
)

// RedirectConfig is a route that answers with a redirect instead of
// reaching an upstream.
type RedirectConfig struct {
	// To is the target: an absolute http or https URL
	// (edgerules.CheckRedirectTo). Its path (empty: none) replaces the
	// route's path prefix in the request's path, as prefix_rewrite does:
	// "https://new.example.com" on route "/" keeps the whole path.
	To string
	// Code is 301, 302, 307 or 308 (RFC 9110 §15.4; 307 and 308 never
	// change the method, nor the body a client sends again).
	Code int
	// StripQuery drops the request's query; by default it is kept.
	StripQuery bool
}

// Redirect is a compiled RedirectConfig for one route's prefix.
type Redirect struct {
	base   string // scheme://host[:port] of To
	prefix string // the route's normalised prefix, without its trailing "/"
	with   string // To's path, without its trailing "/"
	code   int
	strip  bool
}

// NewRedirect compiles c for a route whose normalised path_prefix is
// prefix. Errors: a To edgerules.CheckRedirectTo refuses, a path not in
// normal form, a code other than RedirectCodes.
func NewRedirect(c RedirectConfig, prefix string) (*Redirect, error) {
	if why := edgerules.CheckRedirectTo(c.To); why != "" {
		return nil, fmt.Errorf("redirect: to: %s", why)
	}
	if !slices.Contains(edgerules.RedirectCodes, c.Code) {
		return nil, fmt.Errorf("redirect: code %d is not 301, 302, 307 or 308", c.Code)
	}
	u, _ := url.Parse(c.To)
	p := u.EscapedPath()
	if p != "" {
		if why := edgerules.CheckRewrite(p); why != "" {
			return nil, fmt.Errorf("redirect: to's path: %s", why)
		}
	}
	if u.RawQuery != "" || u.ForceQuery {
		return nil, fmt.Errorf("redirect: to %q has a query; the request's is kept (strip_query = true drops it)", c.To)
	}
	return &Redirect{base: u.Scheme + "://" + u.Host, prefix: strings.TrimSuffix(prefix, "/"), with: strings.TrimSuffix(p, "/"),
		code: c.Code, strip: c.StripQuery}, nil
}

// Code is the redirect's status.
func (d *Redirect) Code() int { return d.code }

// Location is the Location of the answer to a request for path (the
// normalised path, escaped form, that the route matched) with query (its
// raw query, without "?"; "" when none).
func (d *Redirect) Location(path, query string) string {
	p, ok := replacePrefix(path, d.prefix, d.with)
	if !ok { // not under the prefix: the target's path alone
		p = d.with
		if p == "" {
			p = "/"
		}
	}
	if query == "" || d.strip {
		return d.base + p
	}
	return d.base + p + "?" + query
}

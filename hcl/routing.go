package hcl

import (
	"fmt"
	"slices"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/impulse-agent/impulse-agent/internal/edgerules"
)

// A route's path, header and redirect rules (README "Path rewrites",
// "Header rules", "Redirects"): strip_prefix, prefix_rewrite,
// request_headers, response_headers and redirect in upstream.route
// (header blocks also in upstream, as the default of its routes). Checked
// with the rules the gateway applies (internal/edgerules).

// DefaultRedirectCode is redirect.code's default: 308 keeps the method
// and body (RFC 9110 §15.4.9), as interface.md writes it.
const DefaultRedirectCode = 308

// rawHeaderRules is request_headers or response_headers.
type rawHeaderRules struct {
	DefRange hcl2.Range      `hcl:",def_range"`
	Set      *hcl2.Attribute `hcl:"set,optional"`
	Add      *hcl2.Attribute `hcl:"add,optional"`
	Remove   *hcl2.Attribute `hcl:"remove,optional"`
}

// rawRedirect is upstream.route.redirect.
type rawRedirect struct {
	DefRange   hcl2.Range      `hcl:",def_range"`
	To         *hcl2.Attribute `hcl:"to,optional"`
	Code       *hcl2.Attribute `hcl:"code,optional"`
	StripQuery *hcl2.Attribute `hcl:"strip_query,optional"`
}

func (r *rawHeaderRules) defRange() hcl2.Range { return r.DefRange }
func (r *rawRedirect) defRange() hcl2.Range    { return r.DefRange }

// HeaderRules is a request_headers or response_headers block: fields
// removed, then set (replacing every value), then added (after the
// field's values). Names are field names as written; values may hold
// "{client_ip}", "{request_id}", "{host}", "{scheme}" and "{route}".
type HeaderRules struct {
	Set, Add map[string]string
	Remove   []string
}

// Redirect is upstream.route.redirect: the route answers Code with
// Location To, its path replacing the route's path_prefix, and the
// request's query unless StripQuery.
type Redirect struct {
	// To is an absolute http or https URL without query or fragment.
	To string
	// Code is 301, 302, 307 or 308 (default 308).
	Code int
	// StripQuery drops the request's query (default false: kept).
	StripQuery bool
}

// buildUpstreamHeaders converts an upstream's header blocks into u and
// gives them to each route without its own (a route's block replaces the
// upstream's whole).
func buildUpstreamHeaders(b blk, r *rawUpstream, u *Upstream) {
	if h := one(r.RequestHeaders, b.path, "request_headers", b.diags); h != nil {
		u.RequestHeaders = buildHeaderRules(b.child("request_headers", h.DefRange), h, true)
	}
	if h := one(r.ResponseHeaders, b.path, "response_headers", b.diags); h != nil {
		u.ResponseHeaders = buildHeaderRules(b.child("response_headers", h.DefRange), h, false)
	}
	for i := range u.Routes {
		rt := &u.Routes[i]
		if rt.RequestHeaders == nil && rt.Redirect == nil {
			rt.RequestHeaders = u.RequestHeaders
		}
		if rt.ResponseHeaders == nil {
			rt.ResponseHeaders = u.ResponseHeaders
		}
	}
}

// buildPathMatch converts a route's path or path_regex into rt (its
// PathPrefix then ""), and reports whether it had one: at most one of
// path_prefix, path and path_regex may be written. An empty path or
// path_regex is absent (interface.md writes the defaults out as "").
func buildPathMatch(b blk, r *rawRoute, rt *Route) bool {
	path, _ := b.strOK(r.Path, "")
	re, _ := b.strOK(r.PathRegex, "")
	var written []*hcl2.Attribute
	for _, w := range []struct {
		a   *hcl2.Attribute
		set bool
	}{{r.PathPrefix, r.PathPrefix != nil}, {r.Path, path != ""}, {r.PathRegex, re != ""}} {
		if w.set {
			written = append(written, w.a)
		}
	}
	if len(written) > 1 {
		b.errorf(written[1], "", "Conflicting path matches", "%s and %s are both set; a route matches paths by one of path_prefix, path and path_regex.", written[0].Name, written[1].Name)
	}
	switch {
	case path != "":
		if why := checkPathPrefix(path); why != "" {
			b.errorf(r.Path, "", "Invalid path", "%s.", why)
		}
		rt.Path = path
	case re != "":
		if _, err := edgerules.CompilePathRegex(re); err != nil {
			b.errorf(r.PathRegex, "", "Invalid path_regex", "%q: %v (RE2 syntax, matched against the whole normalised path).", re, err)
		}
		rt.PathRegex = re
	default:
		return false
	}
	rt.PathPrefix = ""
	for _, a := range rewritesWritten(r) {
		if a != nil {
			b.errorf(a, "", "Rewrite without a prefix", "%s replaces the route's path_prefix; a route matched by path or path_regex has none.", a.Name)
		}
	}
	return true
}

// rewritesWritten are r's strip_prefix and prefix_rewrite when they
// rewrite: strip_prefix = true, a non-empty prefix_rewrite (the defaults
// written out, false and "", rewrite nothing). Type errors are
// buildRouteRules' to report.
func rewritesWritten(r *rawRoute) []*hcl2.Attribute {
	var out []*hcl2.Attribute
	if a := r.StripPrefix; a != nil {
		if v, ds := a.Expr.Value(nil); !ds.HasErrors() && v.Type() == cty.Bool && v.IsKnown() && !v.IsNull() && v.True() {
			out = append(out, a)
		}
	}
	if a := r.PrefixRewrite; a != nil {
		if v, ds := a.Expr.Value(nil); !ds.HasErrors() && v.Type() == cty.String && v.IsKnown() && !v.IsNull() && v.AsString() != "" {
			out = append(out, a)
		}
	}
	return out
}

// buildRouteRules converts a route's path, header and redirect rules.
func buildRouteRules(b blk, r *rawRoute, rt *Route) {
	rt.StripPrefix = b.boolean(r.StripPrefix, false)
	if p, ok := b.strOK(r.PrefixRewrite, ""); ok && p != "" { // "": none
		if why := edgerules.CheckRewrite(p); why != "" {
			b.errorf(r.PrefixRewrite, "", "Invalid prefix_rewrite", "%s.", why)
		} else {
			rt.PrefixRewrite = p
		}
	}
	if rt.StripPrefix && rt.PrefixRewrite != "" {
		b.errorf(r.PrefixRewrite, "", "Conflicting rewrites", "strip_prefix = true already rewrites the prefix (as prefix_rewrite = \"/\"); keep one.")
	}
	if h := one(r.RequestHeaders, b.path, "request_headers", b.diags); h != nil {
		rt.RequestHeaders = buildHeaderRules(b.child("request_headers", h.DefRange), h, true)
	}
	if h := one(r.ResponseHeaders, b.path, "response_headers", b.diags); h != nil {
		rt.ResponseHeaders = buildHeaderRules(b.child("response_headers", h.DefRange), h, false)
	}
	if d := one(r.Redirects, b.path, "redirect", b.diags); d != nil {
		rb := b.child("redirect", d.DefRange)
		rt.Redirect = buildRedirect(rb, d)
		for _, a := range rewritesWritten(r) {
			if a != nil {
				b.errorf(a, "", "Rewrite on a redirect", "a redirect route reaches no backend; its redirect's to replaces the path prefix.")
			}
		}
		if len(r.RequestHeaders) > 0 {
			rb := b.child("request_headers", r.RequestHeaders[0].DefRange)
			rb.blockErrorf("Request headers on a redirect", "a redirect route reaches no backend; remove the block.")
		}
	}
}

// onlyRedirects reports whether every route of r answers with a redirect
// or has splits (splits.go): such an upstream needs no backend.
func onlyRedirects(r *rawUpstream) bool {
	for _, rt := range r.Routes {
		if len(rt.Redirects) == 0 && len(rt.Splits) == 0 {
			return false
		}
	}
	return len(r.Routes) > 0
}

func buildRedirect(b blk, r *rawRedirect) *Redirect {
	d := &Redirect{Code: DefaultRedirectCode}
	switch to, ok := b.strOK(r.To, ""); {
	case r.To == nil:
		b.errorf(nil, "to", "Missing to", "to is required, as in \"https://new.example.com\".")
	case !ok:
	default:
		if why := edgerules.CheckRedirectTo(to); why != "" {
			b.errorf(r.To, "", "Invalid to", "%s.", why)
		} else if why := redirectPath(to); why != "" {
			b.errorf(r.To, "", "Invalid to", "%s.", why)
		}
		d.To = to
	}
	if code, ok := b.integer(r.Code, DefaultRedirectCode, 0, 999); ok && !slices.Contains(edgerules.RedirectCodes, code) {
		b.errorf(r.Code, "", "Invalid code", "%d is not a redirect status; use 301, 302, 307 or 308 (307 and 308 keep the method).", code)
	} else {
		d.Code = code
	}
	d.StripQuery = b.boolean(r.StripQuery, false)
	return d
}

// redirectPath says why the path or query of to (a URL CheckRedirectTo
// took) cannot be a redirect's, or returns "".
func redirectPath(to string) string {
	rest := to[strings.Index(to, "//")+2:]
	i := strings.IndexAny(rest, "/?")
	if i < 0 {
		return ""
	}
	p, q, hasQ := strings.Cut(rest[i:], "?")
	if hasQ {
		return fmt.Sprintf("%q has a query (%q); the request's is kept, strip_query = true drops it", to, q)
	}
	if why := edgerules.CheckRewrite(p); why != "" {
		return "its path " + why
	}
	return ""
}

// buildHeaderRules converts a request_headers (request) or
// response_headers block. Every field name is checked by
// edgerules.CheckHeaderRuleName, every value by
// edgerules.ParseHeaderValue; a field may appear once across set, add
// and remove (case-insensitive), each problem at its own key or value.
func buildHeaderRules(b blk, r *rawHeaderRules, request bool) *HeaderRules {
	h := &HeaderRules{}
	seen := map[string]string{} // lower-cased field → set, add or remove
	name := func(a *hcl2.Attribute, n, what string) bool {
		if why := edgerules.CheckHeaderRuleName(n, request); why != "" {
			b.errorf(a, "", "Invalid field", "%s.", why)
			return false
		}
		k := strings.ToLower(n)
		if prev, dup := seen[k]; dup {
			b.errorf(a, "", "Duplicate field", "%q is already in %s; a field may be in one of set, add and remove, once.", n, prev)
			return false
		}
		seen[k] = what
		return true
	}
	if r.Remove != nil {
		exprs, ds := hcl2.ExprList(r.Remove.Expr)
		if ds.HasErrors() {
			b.errorf(r.Remove, "", "Invalid value type", "a list of field names is required, as [\"X-Debug\"].")
		}
		for _, e := range exprs {
			item := &hcl2.Attribute{Name: r.Remove.Name, Expr: e, Range: e.Range(), NameRange: r.Remove.NameRange}
			if n, ok := b.strOK(item, ""); ok && name(item, n, "remove") {
				h.Remove = append(h.Remove, n)
			}
		}
	}
	h.Set = b.headerMap(r.Set, "set", name)
	h.Add = b.headerMap(r.Add, "add", name)
	return h
}

// headerMap converts set or add, a map of field names to values; name
// checks (and records) each field name.
func (b blk) headerMap(a *hcl2.Attribute, what string, name func(*hcl2.Attribute, string, string) bool) map[string]string {
	if a == nil {
		return nil
	}
	pairs, ds := hcl2.ExprMap(a.Expr)
	if ds.HasErrors() {
		b.errorf(a, "", "Invalid value type", "a map of field names to values is required, as { \"X-Env\" = \"prod\" }.")
		return nil
	}
	out := map[string]string{}
	for _, p := range pairs {
		key := &hcl2.Attribute{Name: a.Name, Expr: p.Key, Range: p.Key.Range(), NameRange: a.NameRange}
		kv, kds := p.Key.Value(nil)
		if kds.HasErrors() || kv.IsNull() || !kv.Type().Equals(cty.String) {
			b.errorf(key, "", "Invalid field", "a field name is a string.")
			continue
		}
		item := &hcl2.Attribute{Name: a.Name, Expr: p.Value, Range: p.Value.Range(), NameRange: a.NameRange}
		v, ok := b.strOK(item, "")
		if !ok || !name(key, kv.AsString(), what) {
			continue
		}
		if _, why := edgerules.ParseHeaderValue(v); why != "" {
			b.errorf(item, "", "Invalid value", "%s.", why)
			continue
		}
		out[kv.AsString()] = v
	}
	return out
}

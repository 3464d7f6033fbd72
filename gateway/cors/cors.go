// Package cors is the CORS stage of the pipeline (README "CORS"): a
// route's Policy answers CORS-preflight requests at the edge and adds the
// CORS response fields to the route's other responses, as the Fetch
// standard's CORS protocol has them (https://fetch.spec.whatwg.org/#http-cors-protocol,
// §3.2: "HTTP requests", "HTTP responses", "CORS protocol and credentials").
// Decisions are pure functions of the request's fields; nothing here
// writes a response.
package cors

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MaxMaxAge bounds Config.MaxAge: browsers cap what they keep anyway
// (Firefox 24 hours, Chromium 2 hours).
const MaxMaxAge = 24 * time.Hour

// Config is a route's cors block.
type Config struct {
	// AllowOrigins are the origins allowed, each "scheme://host[:port]"
	// (an origin's ASCII serialization: no path, lower-case, the scheme's
	// default port omitted), or the single value "*" (any origin, without
	// credentials). Empty: no origin (only the fields the backend would
	// otherwise have sent are removed).
	AllowOrigins []string
	// AllowMethods are the methods a preflight allows besides the
	// CORS-safelisted GET, HEAD and POST, which need no preflight entry.
	AllowMethods []string
	// AllowHeaders are the request fields a preflight allows
	// (case-insensitive), or "*" (any but Authorization, without
	// credentials). ExposeHeaders are the response fields scripts may read
	// besides the CORS-safelisted ones, or "*" (without credentials).
	AllowHeaders, ExposeHeaders []string
	// MaxAge is how long a browser may keep a preflight's answer
	// (Access-Control-Max-Age, whole seconds, at most MaxMaxAge); 0 sends
	// none, and browsers keep it 5 seconds (the Fetch standard's default).
	MaxAge time.Duration
	// AllowCredentials sends Access-Control-Allow-Credentials: true, so
	// that requests with cookies or HTTP authentication may be read.
	AllowCredentials bool
}

// Policy is a compiled Config. Safe for concurrent use; never modified
// once built.
type Policy struct {
	anyOrigin   bool
	origins     map[string]bool
	methods     map[string]bool
	headers     map[string]bool // lower-case
	anyHeader   bool
	credentials bool
	// Field values sent, built once (shared: never modified).
	allowMethods, allowHeaders, exposeHeaders, maxAge []string
}

// Errors of New (the agent's checks at load make them a bug).
var (
	ErrCredentialsWildcard = errors.New(`cors: allow_credentials cannot be combined with "*" (the Fetch standard ignores a "*" on a request with credentials)`)
)

// New compiles c. Errors: an origin, method or field name CheckOrigin,
// CheckMethod or CheckHeader refuses, "*" together with AllowCredentials
// (ErrCredentialsWildcard), a MaxAge out of range or not whole seconds.
func New(c Config) (*Policy, error) {
	p := &Policy{origins: map[string]bool{}, methods: map[string]bool{}, headers: map[string]bool{}, credentials: c.AllowCredentials}
	for _, o := range c.AllowOrigins {
		if o == "*" {
			if len(c.AllowOrigins) > 1 {
				return nil, errors.New(`cors: "*" allows every origin; list it alone`)
			}
			p.anyOrigin = true
			continue
		}
		norm, why := CheckOrigin(o)
		if why != "" {
			return nil, errors.New("cors: " + why)
		}
		p.origins[norm] = true
	}
	for _, m := range c.AllowMethods {
		if why := CheckMethod(m); why != "" {
			return nil, errors.New("cors: " + why)
		}
		p.methods[m] = true
	}
	for _, list := range [][]string{c.AllowHeaders, c.ExposeHeaders} {
		for _, h := range list {
			if h == "*" {
				continue
			}
			if why := CheckHeader(h); why != "" {
				return nil, errors.New("cors: " + why)
			}
		}
	}
	for _, h := range c.AllowHeaders {
		if h == "*" {
			p.anyHeader = true
		}
		p.headers[strings.ToLower(h)] = true
	}
	if c.AllowCredentials && (p.anyOrigin || p.anyHeader || contains(c.ExposeHeaders, "*")) {
		return nil, ErrCredentialsWildcard
	}
	if c.MaxAge < 0 || c.MaxAge > MaxMaxAge || c.MaxAge%time.Second != 0 {
		return nil, fmt.Errorf("cors: max_age %s is not a whole number of seconds in 0s..24h", c.MaxAge)
	}
	if len(c.AllowMethods) > 0 {
		p.allowMethods = []string{strings.Join(c.AllowMethods, ", ")}
	}
	if len(c.AllowHeaders) > 0 {
		p.allowHeaders = []string{strings.Join(c.AllowHeaders, ", ")}
	}
	if len(c.ExposeHeaders) > 0 {
		p.exposeHeaders = []string{strings.Join(c.ExposeHeaders, ", ")}
	}
	if c.MaxAge > 0 {
		p.maxAge = []string{strconv.FormatInt(int64(c.MaxAge/time.Second), 10)}
	}
	return p, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// CheckOrigin returns o as an origin's ASCII serialization (lower-case,
// without the scheme's default port), or why o is not one: it must be
// "scheme://host[:port]", without user info, path, query or fragment.
// "null" (the origin of sandboxed documents and file: pages, which any
// page can take) and wildcards ("https://*.example.com") are refused.
func CheckOrigin(o string) (string, string) {
	if o == "null" {
		return "", `"null" is the origin of every sandboxed document and local file: allowing it allows any page that asks to be sandboxed`
	}
	if strings.Contains(o, "*") {
		return "", fmt.Sprintf("%q: wildcards are not supported; list each origin, or \"*\" alone", o)
	}
	u, err := url.Parse(o)
	switch {
	case err != nil || u.Scheme == "" || u.Opaque != "":
		return "", fmt.Sprintf("%q is not an origin (scheme://host[:port], as in \"https://app.example.com\")", o)
	case u.User != nil:
		return "", fmt.Sprintf("%q: an origin has no user info", o)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Sprintf("%q: an origin has a host", o)
	case u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.HasSuffix(o, "#"):
		return "", fmt.Sprintf("%q: an origin has no path, query or fragment (a browser sends \"%s://%s\")", o, strings.ToLower(u.Scheme), strings.ToLower(u.Host))
	}
	host := strings.ToLower(u.Host)
	if port := u.Port(); port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Sprintf("%q: invalid port", o)
		}
		scheme := strings.ToLower(u.Scheme)
		if scheme == "https" && n == 443 || scheme == "http" && n == 80 {
			host = strings.TrimSuffix(host, ":"+port)
		}
	}
	return strings.ToLower(u.Scheme) + "://" + host, ""
}

// CheckMethod says why m cannot be an allowed method, or returns "": it
// must be a token (RFC 9110 §9.1), not one of the Fetch standard's
// forbidden methods (CONNECT, TRACE, TRACK), which no browser sends, nor
// a standard method in another case than upper (methods are
// case-sensitive, and fetch() upper-cases DELETE, GET, HEAD, OPTIONS,
// POST and PUT; PATCH is sent as written, and nearly always upper).
func CheckMethod(m string) string {
	switch {
	case !isToken(m):
		return fmt.Sprintf("%q is not an HTTP method token", m)
	case m == "*":
		return `"*" is not supported for methods; list them`
	case strings.EqualFold(m, "CONNECT"), strings.EqualFold(m, "TRACE"), strings.EqualFold(m, "TRACK"):
		return fmt.Sprintf("%q is a forbidden method of the Fetch standard: no browser sends it", m)
	}
	for _, std := range []string{"DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"} {
		if m != std && strings.EqualFold(m, std) {
			// Methods are case-sensitive; browsers upper-case these.
			return fmt.Sprintf("%q never matches: methods are case-sensitive and browsers send %q", m, std)
		}
	}
	return ""
}

// CheckHeader says why h is not a field name (RFC 9110 §5.1), or returns "".
func CheckHeader(h string) string {
	if !isToken(h) {
		return fmt.Sprintf("%q is not a field name (RFC 9110 §5.1)", h)
	}
	return ""
}

// IsPreflight reports whether r is a CORS-preflight request: OPTIONS with
// Origin and Access-Control-Request-Method.
func IsPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && len(r.Header["Origin"]) > 0 && len(r.Header["Access-Control-Request-Method"]) > 0
}

// RequestedMethod is a preflight's Access-Control-Request-Method: the
// method of the request it asks about (the route that would serve that
// request answers it).
func RequestedMethod(r *http.Request) string {
	if v := r.Header["Access-Control-Request-Method"]; len(v) == 1 {
		return strings.TrimSpace(v[0])
	}
	return ""
}

// originOf is r's Origin when it holds exactly one value.
func originOf(h http.Header) string {
	if v := h["Origin"]; len(v) == 1 {
		return v[0]
	}
	return ""
}

// allows reports whether origin may read the route's responses.
func (p *Policy) allows(origin string) bool {
	return origin != "" && origin != "null" && (p.anyOrigin || p.origins[origin])
}

// Preflight answers a CORS-preflight request with fields req: true when
// the origin, the method and every field of Access-Control-Request-Headers
// are allowed, with the answer's fields set in h (Access-Control-Allow-
// Origin, -Methods, -Headers, -Credentials, -Max-Age and Vary); false
// when not, with only Vary set: the answer has no CORS fields, so the
// browser's check fails (Fetch standard §4.10 CORS-preflight fetch).
func (p *Policy) Preflight(req, h http.Header) bool {
	h["Vary"] = varyPreflight
	origin := originOf(req)
	if !p.allows(origin) {
		return false
	}
	m := ""
	if v := req["Access-Control-Request-Method"]; len(v) == 1 {
		m = strings.TrimSpace(v[0])
	}
	if m == "" || !p.methods[m] && m != http.MethodGet && m != http.MethodHead && m != http.MethodPost {
		return false
	}
	for _, v := range req["Access-Control-Request-Headers"] {
		for _, name := range strings.Split(v, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			if name == "" {
				continue
			}
			if !p.headers[name] && !(p.anyHeader && name != "authorization") {
				return false
			}
		}
	}
	p.allowOrigin(h, origin)
	if p.allowMethods != nil {
		h["Access-Control-Allow-Methods"] = p.allowMethods
	}
	if p.allowHeaders != nil {
		h["Access-Control-Allow-Headers"] = p.allowHeaders
	}
	if p.maxAge != nil {
		h["Access-Control-Max-Age"] = p.maxAge
	}
	return true
}

// Fields shared by every answer (never modified).
var (
	varyPreflight = []string{"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"}
	trueValue     = []string{"true"}
	anyValue      = []string{"*"}
)

// allowOrigin sets Access-Control-Allow-Origin (and -Credentials) for an
// allowed origin: "*" for any origin without credentials, else the origin
// itself.
func (p *Policy) allowOrigin(h http.Header, origin string) {
	if p.anyOrigin && !p.credentials {
		h["Access-Control-Allow-Origin"] = anyValue
	} else {
		h["Access-Control-Allow-Origin"] = []string{origin}
	}
	if p.credentials {
		h["Access-Control-Allow-Credentials"] = trueValue
	}
}

// responseFields are the CORS response fields: the route's policy owns
// them, so a backend's own are removed first.
var responseFields = []string{"Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Access-Control-Expose-Headers",
	"Access-Control-Allow-Methods", "Access-Control-Allow-Headers", "Access-Control-Max-Age"}

// Respond sets the CORS fields of a response (the backend's, or the
// gateway's own answer) to a request with fields req, in h: the backend's
// Access-Control-* fields are removed; an allowed Origin gets
// Access-Control-Allow-Origin, -Credentials and -Expose-Headers; and
// unless every origin gets "*", Vary gets Origin (the response differs
// by it, for caches), also when the request has no Origin or a refused one.
func (p *Policy) Respond(req, h http.Header) {
	for _, k := range responseFields {
		delete(h, k)
	}
	if !(p.anyOrigin && !p.credentials) {
		addVary(h, "Origin")
	}
	origin := originOf(req)
	if !p.allows(origin) {
		return
	}
	p.allowOrigin(h, origin)
	if p.exposeHeaders != nil {
		h["Access-Control-Expose-Headers"] = p.exposeHeaders
	}
}

// varyOrigin is the Vary of a response without one.
var varyOrigin = []string{"Origin"}

// addVary adds name to h's Vary unless it lists it or "*".
func addVary(h http.Header, name string) {
	v := h["Vary"]
	if len(v) == 0 {
		h["Vary"] = varyOrigin
		return
	}
	for _, line := range v {
		for _, t := range strings.Split(line, ",") {
			if t = strings.TrimSpace(t); t == "*" || strings.EqualFold(t, name) {
				return
			}
		}
	}
	h["Vary"] = append(v[:len(v):len(v)], name)
}

// isToken reports whether s is an RFC 9110 §5.6.2 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// Package cors is the CORS stage of the pipeline (README "CORS"): a
// route's Policy answers CORS-preflight requests at the edge and adds the
// CORS response fields to the route's other responses, as the Fetch
// standard's CORS protocol has them (https://fetch.spec.whatwg.org/#http-cors-protocol,
// sections "HTTP requests", "HTTP responses", "CORS protocol and credentials").
// Decisions are pure functions of the request's fields; nothing here
// writes a response.
package cors

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/impulse-agent/impulse-agent/internal/edgerules"
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

// ErrCredentialsWildcard is New's error for AllowCredentials with a "*".
var ErrCredentialsWildcard = errors.New(`cors: allow_credentials cannot be combined with "*" (the Fetch standard ignores a "*" on a request with credentials)`)

// New compiles c. Errors (the agent's checks at load make them a bug): an
// origin, method or field name that edgerules.CheckOrigin, CheckMethod or
// CheckHeader refuses, "*" among other origins, "*" together with
// AllowCredentials (ErrCredentialsWildcard), a MaxAge out of range or not
// whole seconds.
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
		norm, why := edgerules.CheckOrigin(o)
		if why != "" {
			return nil, errors.New("cors: " + why)
		}
		p.origins[norm] = true
	}
	for _, m := range c.AllowMethods {
		if why := edgerules.CheckMethod(m); why != "" {
			return nil, errors.New("cors: " + why)
		}
		p.methods[m] = true
	}
	for _, list := range [][]string{c.AllowHeaders, c.ExposeHeaders} {
		for _, h := range list {
			if h == "*" {
				continue
			}
			if why := edgerules.CheckHeader(h); why != "" {
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
	if c.AllowCredentials && (p.anyOrigin || p.anyHeader || slices.Contains(c.ExposeHeaders, "*")) {
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
// browser's check fails (Fetch standard, "CORS-preflight fetch").
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
// allowed origin: "*" when every origin is, else the origin itself.
func (p *Policy) allowOrigin(h http.Header, origin string) {
	if p.anyOrigin { // never with credentials (New)
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
	if !p.anyOrigin {
		addVaryOrigin(h)
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

// addVaryOrigin adds Origin to h's Vary unless it lists it or "*".
func addVaryOrigin(h http.Header) {
	v := h["Vary"]
	if len(v) == 0 {
		h["Vary"] = varyOrigin
		return
	}
	if httpguts.HeaderValuesContainsToken(v, "Origin") || httpguts.HeaderValuesContainsToken(v, "*") {
		return
	}
	h["Vary"] = append(v[:len(v):len(v)], "Origin")
}

package hcl

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/impulse-agent/impulse-agent/internal/jwks"
)

// The jwt block of a route (README "Edge authentication", JWT): bearer
// tokens verified with a key set, read from jwks_file at every load
// (validate, startup, reload: a SIGHUP picks up a rotated file) or
// fetched by the gateway from jwks_url.

// Defaults and bounds of the jwt block.
const (
	// DefaultJWTClockSkew is jwt.clock_skew when absent: the leeway of exp,
	// nbf and iat for clocks that are NTP-synchronized but not exactly.
	DefaultJWTClockSkew = 30 * time.Second
	// MaxJWTClockSkew bounds clock_skew: a larger leeway would let an
	// expired token pass for longer than tokens usually live.
	MaxJWTClockSkew = 5 * time.Minute
)

// rawJWT is upstream.route.jwt.
type rawJWT struct {
	DefRange      hcl2.Range      `hcl:",def_range"`
	Issuer        *hcl2.Attribute `hcl:"issuer,optional"`
	Audiences     *hcl2.Attribute `hcl:"audiences,optional"`
	JWKSURL       *hcl2.Attribute `hcl:"jwks_url,optional"`
	JWKSFile      *hcl2.Attribute `hcl:"jwks_file,optional"`
	JWKSCAFile    *hcl2.Attribute `hcl:"jwks_ca_file,optional"`
	Algorithms    *hcl2.Attribute `hcl:"algorithms,optional"`
	ForwardClaims *hcl2.Attribute `hcl:"forward_claims,optional"`
	ClockSkew     *hcl2.Attribute `hcl:"clock_skew,optional"`
	Realm         *hcl2.Attribute `hcl:"realm,optional"`
}

func (r *rawJWT) defRange() hcl2.Range { return r.DefRange }

// JWT is upstream.route.jwt: requests must carry "Authorization: Bearer
// TOKEN" with a JWT signed by a key of the set, from Issuer, for one of
// Audiences, not expired.
type JWT struct {
	// Issuer is the required "iss" (required, exact).
	Issuer string
	// Audiences: a token's "aud" must name one (required, non-empty).
	Audiences []string
	// JWKSURL is the https URL of the key set, fetched by the gateway;
	// JWKSCAFile (optional) the PEM CAs its certificate must chain to
	// instead of the system's, read at load into JWKSRoots.
	JWKSURL    string
	JWKSCAFile string
	JWKSRoots  *x509.CertPool
	// JWKSFile is the key set's file as configured; JWKS what it held at
	// load. Exactly one of JWKSURL and JWKSFile is set.
	JWKSFile string
	JWKS     *jwks.Set
	// Algorithms are the accepted "alg" values (default
	// jwks.DefaultAlgorithms: ES256, RS256).
	Algorithms []string
	// ForwardClaims maps a claim to the request field its value is sent
	// in (default none).
	ForwardClaims map[string]string
	// ClockSkew is the leeway of exp, nbf and iat (default 30s, 0..5m).
	ClockSkew time.Duration
	// Realm is sent in WWW-Authenticate (default "impulse-agent").
	Realm string
}

// buildJWT converts a jwt block; rt is the route so far (its api_keys and
// basic_auth, which must not read Authorization too).
func buildJWT(b blk, r *rawJWT, rt *Route) *JWT {
	j := &JWT{Algorithms: slices.Clone(jwks.DefaultAlgorithms), ClockSkew: DefaultJWTClockSkew, Realm: DefaultBasicRealm}
	switch {
	case rt.BasicAuth != nil:
		b.blockErrorf("Conflicting authentication", "basic_auth and jwt both read Authorization; a route has one of them.")
	case rt.APIKeys != nil && fieldKey(rt.APIKeys.Header) == "authorization":
		b.blockErrorf("Conflicting authentication", "api_keys reads its key from Authorization, which carries the bearer token.")
	}
	if iss, ok := b.strOK(r.Issuer, ""); r.Issuer == nil || ok && iss == "" {
		b.errorf(r.Issuer, "issuer", "Missing issuer", "issuer is required: the \"iss\" every token must carry (RFC 8725 §3.8).")
	} else {
		j.Issuer = iss
	}
	before := b.errCount()
	j.Audiences = b.strList(r.Audiences, nil)
	if r.Audiences == nil || len(j.Audiences) == 0 && b.errCount() == before {
		b.errorf(r.Audiences, "audiences", "Missing audiences", "audiences is required, with at least one: a token's \"aud\" must name one (RFC 8725 §3.9).")
	}
	if r.Algorithms != nil {
		before := b.errCount()
		j.Algorithms = b.strList(r.Algorithms, func(alg string) string { return jwks.CheckAlgorithm(alg) })
		if len(j.Algorithms) == 0 && b.errCount() == before { // not when each was refused: one error each is enough
			b.errorf(r.Algorithms, "", "Missing algorithms", "at least one algorithm is required (%s).", strings.Join(jwks.Algorithms, ", "))
		}
		for i, alg := range j.Algorithms {
			if slices.Contains(j.Algorithms[:i], alg) {
				b.errorf(r.Algorithms, "", "Duplicate algorithm", "%q is listed twice.", alg)
			}
		}
	}
	j.ForwardClaims = b.forwardClaims(r.ForwardClaims)
	j.ClockSkew = b.duration(r.ClockSkew, DefaultJWTClockSkew, 0, MaxJWTClockSkew)
	j.Realm = b.realm(r.Realm)
	b.jwtKeys(r, j)
	return j
}

// jwtKeys reads the key source of r into j: exactly one of jwks_url and
// jwks_file; jwks_ca_file only with jwks_url.
func (b blk) jwtKeys(r *rawJWT, j *JWT) {
	switch {
	case r.JWKSURL == nil && r.JWKSFile == nil:
		b.errorf(nil, "jwks_url", "Missing key set", "one of jwks_url and jwks_file is required.")
		return
	case r.JWKSURL != nil && r.JWKSFile != nil:
		b.errorf(r.JWKSFile, "", "Conflicting key sets", "jwks_url and jwks_file are exclusive; the route has one key set.")
		return
	case r.JWKSCAFile != nil && r.JWKSURL == nil:
		b.errorf(r.JWKSCAFile, "", "Unused jwks_ca_file", "jwks_ca_file is the CA of jwks_url's server; there is no jwks_url.")
	}
	if r.JWKSURL != nil {
		if u, ok := b.strOK(r.JWKSURL, ""); ok {
			if why := checkJWKSURL(u); why != "" {
				b.errorf(r.JWKSURL, "", "Invalid jwks_url", "%s; got %q.", why, redactURL(u))
			} else {
				j.JWKSURL = u
			}
		}
		if p, ok := b.fileOK(r.JWKSCAFile); ok {
			pool, err := LoadCertPool(p)
			var fe *TLSFileError
			if errors.As(err, &fe) {
				b.errorf(r.JWKSCAFile, "", "Invalid CA file", "%q: %s.", fe.Path, fe.Reason)
			}
			j.JWKSCAFile, j.JWKSRoots = p, pool
		}
		return
	}
	before := b.errCount()
	path, ok := b.fileOK(r.JWKSFile)
	if !ok {
		if path == "" && b.errCount() == before {
			b.errorf(r.JWKSFile, "", "Missing jwks_file", "jwks_file must not be empty.")
		}
		return
	}
	j.JWKSFile = path
	f, err := os.Open(path)
	if err != nil {
		b.errorf(r.JWKSFile, "", "Unreadable file", "cannot read %q: %v.", path, unwrapPathError(err))
		return
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, jwks.MaxBytes+1))
	if err != nil {
		b.errorf(r.JWKSFile, "", "Unreadable file", "cannot read %q: %v.", path, unwrapPathError(err))
		return
	}
	algs := j.Algorithms
	if len(algs) == 0 { // algorithms is in error: no second error for the keys
		algs = jwks.Algorithms
	}
	set, err := jwks.Parse(data, algs)
	switch {
	case err != nil:
		b.errorf(r.JWKSFile, "", "Invalid jwks_file", "%q: %v.", path, err)
	case set.Len() == 0:
		b.add(hcl2.DiagWarning, b.subject(r.JWKSFile), "No keys", b.field("jwks_file")+fmt.Sprintf(": %q holds none: every token of the route is refused with 401.", path))
	}
	j.JWKS = set
}

// checkJWKSURL says why s is not a jwks_url ("" when it is): an absolute
// https URL with a host, without user info or fragment. Plain http is
// refused: the keys decide who gets in (auth.CheckJWKSURL).
func checkJWKSURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a URL"
	case u.Scheme != "https":
		return "the scheme must be https: keys fetched in clear could be replaced on the way (use jwks_file for a local set)"
	case u.Host == "":
		return "no host"
	case u.User != nil:
		return "user info is not allowed"
	case strings.Contains(s, "#"):
		return "a fragment is not allowed"
	}
	return ""
}

// redactURL is s as a message may quote it: its user info, which may be a
// password or a token, replaced by "xxxxx" ("https://xxxxx@host/path"),
// whether or not s parses as a URL.
func redactURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		scheme, rest = "", s
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return s
	}
	if ok {
		scheme += "://"
	}
	return scheme + "xxxxx" + rest[at:]
}

// forwardClaims converts forward_claims, a map of claim names to request
// field names (nil when absent). Each field must be a field name the
// gateway may set (not one of isReservedKeyHeader's, nor Authorization),
// once; each problem is reported at its own key or value.
func (b blk) forwardClaims(a *hcl2.Attribute) map[string]string {
	if a == nil {
		return nil
	}
	pairs, ds := hcl2.ExprMap(a.Expr)
	if ds.HasErrors() {
		b.errorf(a, "", "Invalid value type", "a map of claim names to field names is required, as { sub = \"X-User\" }.")
		return nil
	}
	out := map[string]string{}
	fields := map[string]string{} // fieldKey(field) → claim
	for _, p := range pairs {
		kv, kds := p.Key.Value(nil)
		if kds.HasErrors() || kv.IsNull() || !kv.Type().Equals(cty.String) || kv.AsString() == "" {
			b.errorf(&hcl2.Attribute{Name: a.Name, Expr: p.Key}, "", "Invalid claim name", "a claim name is a non-empty string.")
			continue
		}
		claim := kv.AsString()
		item := &hcl2.Attribute{Name: a.Name, Expr: p.Value, Range: p.Value.Range(), NameRange: a.NameRange}
		field, ok := b.strOK(item, "")
		if !ok {
			continue
		}
		key := fieldKey(field)
		switch {
		case !isToken(field):
			b.errorf(item, "", "Invalid value", "%q is not a field name (RFC 9110 §5.1).", field)
		case isReservedKeyHeader(field) || key == "authorization":
			b.errorf(item, "", "Invalid value", "%q cannot be set on the request%s.", field, spelling(field))
		case fields[key] != "":
			b.errorf(item, "", "Duplicate field", "%q already carries claim %q.", field, fields[key])
		default:
			fields[key] = claim
			out[claim] = field
		}
	}
	return out
}

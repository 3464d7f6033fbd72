package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/json"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/impulse-agent/impulse-agent/internal/jwks"
)

// JWT authentication (RFC 7519, checked as RFC 8725 recommends): a bearer
// token in Authorization (RFC 6750 §2.1; the scheme case-insensitive),
// a compact JWS whose "alg" is one of the configured algorithms (never
// "none", never HMAC: internal/jwks), signed by a key of the route's key
// set picked by "kid" (RFC 7515 §4.1.4), with "exp" required (RFC 7519
// §4.1.4 makes it optional and Envoy accepts a token without it; RFC 9068
// §2.2 requires it of access tokens, and a leaked token without it would
// be good forever), "nbf" and "iat" checked with the clock skew (RFC 7519
// §4.1.5, §4.1.6; a token issued in the future is refused), "iss" equal
// to the issuer (RFC 8725 §3.8) and "aud" naming one of the audiences
// (RFC 7519 §4.1.3, RFC 8725 §3.9). Claims are read with go-jose's JSON
// decoder: member names match exactly (no "EXP" for "exp") and a
// duplicate member refuses the token (RFC 7519 §4 allows either that or
// the last one). An unknown "crit" header parameter refuses it (RFC 7515
// §4.1.11).
//
// Verified tokens are remembered (jwtcache.go).

// JWT bounds and defaults.
const (
	// MaxTokenBytes bounds a token: 8 KiB, several times what identity
	// providers issue (1–2 KiB); a longer one is refused unread (401).
	MaxTokenBytes = 8 << 10
	// DefaultClockSkew is the leeway of exp, nbf and iat: 30 s, for clocks
	// that are NTP-synchronized but not exactly.
	DefaultClockSkew = 30 * time.Second
	// DefaultRealm is the realm of a JWTConfig without one.
	DefaultRealm = "impulse-agent"
)

// JWTConfig is a route's jwt block.
type JWTConfig struct {
	// Issuer is the "iss" every token must carry (exact match).
	Issuer string
	// Audiences: a token's "aud" must name at least one.
	Audiences []string
	// Algorithms are the accepted "alg" values (jwks.Algorithms; empty:
	// jwks.DefaultAlgorithms).
	Algorithms []string
	// Keys is the set of a jwks_file (read at load); JWKSURL the https
	// URL of a set fetched and refreshed (RemoteKeys), whose certificate
	// must chain to JWKSRoots (nil: the system's roots). Exactly one is
	// set.
	Keys      *jwks.Set
	JWKSURL   string
	JWKSRoots *x509.CertPool
	// ForwardClaims maps a claim name to the request field its value is
	// set in for the backend. A token without one of the claims is refused
	// with 403 insufficient_scope. A client's own fields of these names are
	// always removed (every spelling).
	ForwardClaims map[string]string
	// ClockSkew is the leeway of exp, nbf and iat (≥ 0).
	ClockSkew time.Duration
	// Realm is sent in WWW-Authenticate (RFC 6750 §3; "": DefaultRealm);
	// printable ASCII without quotes or backslashes.
	Realm string
	// Now is the clock (nil: time.Now); for tests of expiry and refresh.
	Now func() time.Time
}

func (c JWTConfig) clock() func() time.Time {
	if c.Now != nil {
		return c.Now
	}
	return time.Now
}

func (c JWTConfig) algorithms() []string {
	if len(c.Algorithms) == 0 {
		return jwks.DefaultAlgorithms
	}
	return c.Algorithms
}

// Why a token was refused: the error_description of the challenge (RFC
// 6750 §3: ASCII without quotes or backslashes). Never a part of the
// token.
const (
	jwtOK = iota
	jwtSeveral
	jwtMalformed
	jwtTooLarge
	jwtAlgorithm
	jwtUnknownKey
	jwtSignature
	jwtNoExp
	jwtExpired
	jwtNotYetValid
	jwtIssuedLater
	jwtIssuer
	jwtAudience
	jwtClaimMissing
	jwtClaimValue
	jwtProblems
)

var jwtDescriptions = [jwtProblems]string{
	jwtSeveral:      "more than one Authorization field",
	jwtMalformed:    "malformed token",
	jwtTooLarge:     "token over " + strconv.Itoa(MaxTokenBytes) + " bytes",
	jwtAlgorithm:    "signature algorithm not accepted",
	jwtUnknownKey:   "unknown signing key",
	jwtSignature:    "invalid signature",
	jwtNoExp:        "token without exp",
	jwtExpired:      "token expired",
	jwtNotYetValid:  "token not yet valid",
	jwtIssuedLater:  "token issued in the future",
	jwtIssuer:       "wrong issuer",
	jwtAudience:     "wrong audience",
	jwtClaimMissing: "a required claim is missing",
	jwtClaimValue:   "a claim cannot be forwarded as a field",
}

// forwardClaim is a claim whose value goes to the backend in field.
type forwardClaim struct{ claim, field string }

// jwtAuth checks bearer tokens for one route.
type jwtAuth struct {
	issuer    string
	audiences jwt.Audience
	algs      []jose.SignatureAlgorithm
	static    *jwks.Set
	remote    *RemoteKeys
	claims    []forwardClaim // sorted by claim
	skew      time.Duration
	now       func() time.Time

	missing    string              // WWW-Authenticate without error
	challenges [jwtProblems]string // per problem

	mu       sync.Mutex
	verified map[[sha256.Size]byte]verifiedToken
}

func newJWT(c JWTConfig, remote *RemoteKeys) *jwtAuth {
	a := &jwtAuth{issuer: c.Issuer, audiences: slices.Clone(c.Audiences), static: c.Keys, remote: remote, skew: c.ClockSkew,
		now: c.clock(), verified: map[[sha256.Size]byte]verifiedToken{}}
	for _, alg := range c.algorithms() {
		a.algs = append(a.algs, jose.SignatureAlgorithm(alg))
	}
	for claim, field := range c.ForwardClaims {
		a.claims = append(a.claims, forwardClaim{claim, textproto.CanonicalMIMEHeaderKey(field)})
	}
	slices.SortFunc(a.claims, func(x, y forwardClaim) int { return strings.Compare(x.claim, y.claim) })
	if c.Realm == "" {
		c.Realm = DefaultRealm
	}
	realm := "Bearer realm=" + strconv.Quote(c.Realm)
	a.missing = realm
	for p := jwtSeveral; p < jwtProblems; p++ {
		code := "invalid_token"
		switch p {
		case jwtSeveral:
			code = "invalid_request" // RFC 6750 §3.1: a repeated parameter, 400
		case jwtClaimMissing, jwtClaimValue:
			code = "insufficient_scope"
		}
		a.challenges[p] = realm + `, error="` + code + `", error_description="` + jwtDescriptions[p] + `"`
	}
	return a
}

// check is the verdict on r's bearer token: ResultMissing without an
// Authorization field of the Bearer scheme (RFC 6750 §3.1: no error code
// then), ResultMalformed for more than one Authorization field (RFC 6750
// §3.1 invalid_request), ResultDenied for a token that is not valid,
// ResultForbidden for
// a valid one lacking a claim to forward, ResultUnavailable when no usable
// key set could be had, ResultCanceled when the client left while a fetch
// was awaited; else ResultOK, the "sub" claim and the forwarded fields
// set on r. challenge is the WWW-Authenticate value of a refusal.
func (a *jwtAuth) check(ctx context.Context, h http.Header) (result, subject, challenge string) {
	for _, fc := range a.claims {
		deleteSpellings(h, fc.field) // the client's own, never believed
	}
	v := h["Authorization"]
	if len(v) == 0 {
		return ResultMissing, "", a.missing
	}
	if len(v) > 1 {
		return ResultMalformed, "", a.challenges[jwtSeveral]
	}
	scheme, token, _ := strings.Cut(trimOWS(v[0]), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return ResultMissing, "", a.missing
	}
	token = strings.TrimLeft(token, " ")
	switch {
	case len(token) > MaxTokenBytes:
		return a.deny(jwtTooLarge)
	case token == "":
		return a.deny(jwtMalformed)
	}
	set, res := a.keys(ctx)
	if res != ResultOK {
		return res, "", ""
	}
	now := a.now()
	key := sha256.Sum256([]byte(token))
	if vt, ok := a.cached(key, set); ok {
		if now.After(vt.exp.Add(a.skew)) {
			a.forget(key)
			return a.deny(jwtExpired)
		}
		a.apply(h, vt.values)
		return ResultOK, vt.subject, ""
	}
	vt, problem, res := a.verify(ctx, token, set, now)
	switch {
	case res != ResultOK:
		return res, "", ""
	case problem == jwtClaimMissing || problem == jwtClaimValue:
		return ResultForbidden, "", a.challenges[problem]
	case problem != jwtOK:
		return a.deny(problem)
	}
	a.remember(key, vt, now)
	a.apply(h, vt.values)
	return ResultOK, vt.subject, ""
}

func (a *jwtAuth) deny(problem int) (result, subject, challenge string) {
	return ResultDenied, "", a.challenges[problem]
}

// keys is the key set to verify with (ResultOK), or why there is none.
func (a *jwtAuth) keys(ctx context.Context) (*jwks.Set, string) {
	if a.remote == nil {
		return a.static, ResultOK
	}
	return a.remote.current(ctx)
}

// verify checks token against set at now: the verification to remember,
// or the problem found (jwtOK with a result other than ResultOK: no
// usable key set after a refetch).
func (a *jwtAuth) verify(ctx context.Context, token string, set *jwks.Set, now time.Time) (verifiedToken, int, string) {
	sig, err := jose.ParseSignedCompact(token, a.algs)
	if err != nil {
		var alg *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &alg) {
			return verifiedToken{}, jwtAlgorithm, ResultOK
		}
		return verifiedToken{}, jwtMalformed, ResultOK
	}
	hdr := sig.Signatures[0].Header
	if !set.Has(hdr.KeyID, hdr.Algorithm) && a.remote != nil && hdr.KeyID != "" {
		var res string
		if set, res = a.remote.refetch(ctx, set); res != ResultOK {
			return verifiedToken{}, jwtOK, res
		}
	}
	var payload []byte
	tried := false
	set.Candidates(hdr.KeyID, hdr.Algorithm, func(k *jwks.Key) bool {
		tried = true
		payload, err = sig.Verify(k.Public)
		return err == nil
	})
	switch {
	case !tried:
		return verifiedToken{}, jwtUnknownKey, ResultOK
	case err != nil:
		return verifiedToken{}, jwtSignature, ResultOK
	}
	vt, problem := a.claimsOf(payload, now)
	vt.set = set
	return vt, problem, ResultOK
}

// claimsOf checks the verified payload's claims at now.
func (a *jwtAuth) claimsOf(payload []byte, now time.Time) (verifiedToken, int) {
	var cl jwt.Claims
	if err := json.Unmarshal(payload, &cl); err != nil {
		return verifiedToken{}, jwtMalformed
	}
	if cl.Expiry == nil {
		return verifiedToken{}, jwtNoExp
	}
	err := cl.ValidateWithLeeway(jwt.Expected{Issuer: a.issuer, AnyAudience: a.audiences, Time: now}, a.skew)
	switch {
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return verifiedToken{}, jwtIssuer
	case errors.Is(err, jwt.ErrInvalidAudience):
		return verifiedToken{}, jwtAudience
	case errors.Is(err, jwt.ErrNotValidYet):
		return verifiedToken{}, jwtNotYetValid
	case errors.Is(err, jwt.ErrExpired):
		return verifiedToken{}, jwtExpired
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return verifiedToken{}, jwtIssuedLater
	case err != nil:
		return verifiedToken{}, jwtMalformed
	}
	vt := verifiedToken{exp: cl.Expiry.Time(), subject: cl.Subject}
	if len(a.claims) == 0 {
		return vt, jwtOK
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(payload, &all); err != nil {
		return verifiedToken{}, jwtMalformed
	}
	vt.values = make([]string, len(a.claims))
	for i, fc := range a.claims {
		raw, ok := all[fc.claim]
		if !ok || string(raw) == "null" {
			return verifiedToken{}, jwtClaimMissing
		}
		if vt.values[i], ok = fieldValue(raw); !ok {
			return verifiedToken{}, jwtClaimValue
		}
	}
	return vt, jwtOK
}

// fieldValue is the request field value of a claim's JSON value raw: a
// string as it is, a number or a boolean as written, an array or an
// object as compact JSON. ok is false for a string holding a control
// character (a field value cannot carry one, RFC 9110 §5.5).
func fieldValue(raw json.RawMessage) (string, bool) {
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) != nil || strings.ContainsFunc(s, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return "", false
		}
		return s, true
	case '[', '{':
		var b bytes.Buffer
		if json.Compact(&b, raw) != nil {
			return "", false
		}
		return b.String(), true
	}
	return string(raw), true
}

// apply sets the forwarded fields on h.
func (a *jwtAuth) apply(h http.Header, values []string) {
	for i, fc := range a.claims {
		h[fc.field] = []string{values[i]}
	}
}

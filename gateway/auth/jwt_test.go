package auth

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/jwks"
	"github.com/impulse-agent/impulse-agent/internal/testjwt"
)

const (
	testIssuer   = "https://id.example"
	testAudience = "api"
)

var testStart = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// staticJWT is a jwt check over a jwks_file set of signers, at clk, that
// forwards sub as X-User.
func staticJWT(t testing.TB, clk *testjwt.Clock, claims map[string]string, signers ...*testjwt.Signer) *jwtAuth {
	t.Helper()
	set, err := jwks.Parse(testjwt.JWKS(signers...), jwks.DefaultAlgorithms)
	if err != nil {
		t.Fatal(err)
	}
	return newJWT(JWTConfig{Issuer: testIssuer, Audiences: []string{"other", testAudience}, Keys: set, ForwardClaims: claims,
		ClockSkew: DefaultClockSkew, Realm: "r", Now: clk.Now}, nil)
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// with is claims with the changes in kv (nil value: removed).
func with(claims map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range claims {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

// TestJWTCheck: case A05's tokens against a key set, one check each: the
// valid ES256 and RS256 tokens pass with sub forwarded; every invalid one
// is refused with its error_description; a token without a forwarded
// claim is forbidden (insufficient_scope); a client's X-User never
// survives.
func TestJWTCheck(t *testing.T) {
	clk := testjwt.NewClock(testStart)
	es, rs, other := testjwt.ES256("es-1"), testjwt.RS256("rs-1"), testjwt.ES256("es-1")
	a := staticJWT(t, clk, map[string]string{"sub": "X-User"}, es, rs)
	now := clk.Now()
	good := testjwt.Claims(now, testIssuer, testAudience, "alice")
	valid := es.Sign(good)
	parts := strings.Split(valid, ".")
	forged := parts[0] + "." + strings.Split(es.Sign(with(good, "sub", "mallory")), ".")[1] + "." + parts[2]
	noKid := es.SignHeader(nil, good)
	for _, tc := range []struct {
		name    string
		h       http.Header
		result  string
		desc    string // in the challenge; "-" for none
		subject string
	}{
		{"ES256", bearer(valid), ResultOK, "", "alice"},
		{"RS256", bearer(rs.Sign(with(good, "sub", "bob"))), ResultOK, "", "bob"},
		{"lower-case scheme, OWS", http.Header{"Authorization": {" bearer   " + valid + " "}}, ResultOK, "", "alice"},
		{"no kid, one ES256 key", bearer(noKid), ResultOK, "", "alice"},
		{"aud list", bearer(es.Sign(with(good, "aud", []string{"x", testAudience}))), ResultOK, "", "alice"},
		{"expired within the skew", bearer(es.Sign(with(good, "exp", now.Add(-20*time.Second).Unix()))), ResultOK, "", "alice"},
		{"nbf within the skew", bearer(es.Sign(with(good, "nbf", now.Add(20*time.Second).Unix()))), ResultOK, "", "alice"},
		{"no Authorization", http.Header{}, ResultMissing, "-", ""},
		{"Basic scheme", http.Header{"Authorization": {"Basic YTpi"}}, ResultMissing, "-", ""},
		{"two fields", http.Header{"Authorization": {"Bearer " + valid, "Bearer " + valid}}, ResultMalformed, `error="invalid_request", error_description="more than one Authorization field"`, ""},
		{"two fields, one empty", http.Header{"Authorization": {"Bearer " + valid, ""}}, ResultMalformed, `error="invalid_request"`, ""},
		{"two fields, another scheme", http.Header{"Authorization": {"Basic YTpi", "Bearer " + valid}}, ResultMalformed, `error="invalid_request"`, ""},
		{"empty token", http.Header{"Authorization": {"Bearer "}}, ResultDenied, "malformed token", ""},
		{"expired", bearer(es.Sign(with(good, "exp", now.Add(-time.Minute).Unix()))), ResultDenied, "token expired", ""},
		{"not yet valid", bearer(es.Sign(with(good, "nbf", now.Add(time.Minute).Unix()))), ResultDenied, "token not yet valid", ""},
		{"issued in the future", bearer(es.Sign(with(good, "iat", now.Add(time.Minute).Unix()))), ResultDenied, "token issued in the future", ""},
		{"no exp", bearer(es.Sign(with(good, "exp", nil))), ResultDenied, "token without exp", ""},
		{"EXP, not exp", bearer(es.Sign(with(good, "exp", nil, "EXP", now.Add(time.Minute).Unix()))), ResultDenied, "token without exp", ""},
		{"wrong audience", bearer(es.Sign(with(good, "aud", "web"))), ResultDenied, "wrong audience", ""},
		{"no audience", bearer(es.Sign(with(good, "aud", nil))), ResultDenied, "wrong audience", ""},
		{"wrong issuer", bearer(es.Sign(with(good, "iss", "https://evil.example"))), ResultDenied, "wrong issuer", ""},
		{"alg none", bearer(testjwt.Unsigned("es-1", good)), ResultDenied, "signature algorithm not accepted", ""},
		{"HS256 keyed by the public key", bearer(es.HS256WithPublicKey(good)), ResultDenied, "signature algorithm not accepted", ""},
		{"unknown kid", bearer(testjwt.ES256("es-9").Sign(good)), ResultDenied, "unknown signing key", ""},
		{"kid of an RSA key, ES256", bearer(testjwt.ES256("rs-1").Sign(good)), ResultDenied, "unknown signing key", ""},
		{"another key, same kid", bearer(other.Sign(good)), ResultDenied, "invalid signature", ""},
		{"payload swapped", bearer(forged), ResultDenied, "invalid signature", ""},
		{"one part", bearer("abc"), ResultDenied, "malformed token", ""},
		{"four parts", bearer(valid + ".x"), ResultDenied, "malformed token", ""},
		{"JWE-shaped", bearer("a.b.c.d.e"), ResultDenied, "malformed token", ""},
		{"bad base64", bearer("!!." + parts[1] + "." + parts[2]), ResultDenied, "malformed token", ""},
		{"payload not JSON", bearer(es.SignHeader(map[string]any{"kid": "es-1"}, nil)), ResultDenied, "", ""},
		{"huge", bearer(valid + strings.Repeat("A", MaxTokenBytes)), ResultDenied, "token over 8192 bytes", ""},
		{"sub missing", bearer(es.Sign(with(good, "sub", nil))), ResultForbidden, "insufficient_scope", ""},
		{"sub null", bearer(es.Sign(with(good, "sub", json.RawMessage("null")))), ResultForbidden, "a required claim is missing", ""},
	} {
		h := tc.h.Clone()
		h["X-User"] = []string{"forged"}
		h["X_user"] = []string{"forged"}
		res, sub, ch := a.check(context.Background(), h)
		if res != tc.result || sub != tc.subject {
			t.Errorf("%s: %s %q, want %s %q (%s)", tc.name, res, sub, tc.result, tc.subject, ch)
		}
		switch {
		case tc.result == ResultOK:
			if got := h["X-User"]; len(got) != 1 || got[0] != tc.subject || h["X_user"] != nil {
				t.Errorf("%s: X-User %q, X_user %q", tc.name, got, h["X_user"])
			}
		case h["X-User"] != nil || h["X_user"] != nil:
			t.Errorf("%s: a client's X-User survived a refusal", tc.name)
		}
		switch tc.desc {
		case "":
		case "-":
			if ch != `Bearer realm="r"` {
				t.Errorf("%s: challenge %q, want no error", tc.name, ch)
			}
		default:
			if !strings.HasPrefix(ch, `Bearer realm="r", error=`) || !strings.Contains(ch, tc.desc) {
				t.Errorf("%s: challenge %q, want %q", tc.name, ch, tc.desc)
			}
		}
		if tc.result == ResultDenied && !strings.Contains(ch, `error="invalid_token"`) {
			t.Errorf("%s: challenge %q without invalid_token", tc.name, ch)
		}
	}

	// A cached token expires with its exp.
	if res, _, _ := a.check(context.Background(), bearer(valid)); res != ResultOK {
		t.Fatal("valid token, again:", res)
	}
	clk.Add(10*time.Minute + DefaultClockSkew + time.Second)
	if res, _, ch := a.check(context.Background(), bearer(valid)); res != ResultDenied || !strings.Contains(ch, "token expired") {
		t.Errorf("cached token after its exp: %s %s", res, ch)
	}
}

// TestJWTForwardClaims: claim values become fields: strings as they are,
// numbers and booleans as written, arrays and objects as compact JSON; a
// string with a control character is refused (403), not forwarded.
func TestJWTForwardClaims(t *testing.T) {
	clk := testjwt.NewClock(testStart)
	es := testjwt.ES256("k")
	a := staticJWT(t, clk, map[string]string{"sub": "X-User", "n": "X-N", "ok": "x-ok", "roles": "X-Roles", "obj": "X-Obj"}, es)
	claims := with(testjwt.Claims(clk.Now(), testIssuer, testAudience, "ålice"),
		"n", uint64(12345678901234567890), "ok", true, "roles", []string{"a", "b c"}, "obj", map[string]any{"k": "v\"w"})
	h := bearer(es.Sign(claims))
	if res, _, ch := a.check(context.Background(), h); res != ResultOK {
		t.Fatal(res, ch)
	}
	want := map[string]string{"X-User": "ålice", "X-N": "12345678901234567890", "X-Ok": "true", "X-Roles": `["a","b c"]`, "X-Obj": `{"k":"v\"w"}`}
	for k, v := range want {
		if got := h[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	h = bearer(es.Sign(with(claims, "sub", "a\nX-Admin: 1")))
	if res, _, ch := a.check(context.Background(), h); res != ResultForbidden || !strings.Contains(ch, "cannot be forwarded") {
		t.Errorf("control character: %s %s", res, ch)
	}
}

// TestAuthenticateJWT: through the policy, Authorization is removed on
// success and the decision carries jwt's step, subject and challenge;
// basic_auth and jwt together are refused.
func TestAuthenticateJWT(t *testing.T) {
	clk := testjwt.NewClock(testStart)
	es := testjwt.ES256("k")
	set, _ := jwks.Parse(testjwt.JWKS(es), jwks.DefaultAlgorithms)
	c := JWTConfig{Issuer: testIssuer, Audiences: []string{testAudience}, Keys: set, Realm: "r", Now: clk.Now}
	p, err := New(Config{JWT: &c}, Shared{})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest("GET", "/", nil)
	r.Header = bearer(es.Sign(testjwt.Claims(clk.Now(), testIssuer, testAudience, "alice")))
	d := p.Authenticate(context.Background(), r, "/")
	if !d.OK() || d.Subject != "alice" || d.Last() != (Step{MethodJWT, ResultOK}) || r.Header["Authorization"] != nil {
		t.Errorf("decision %+v, header %v", d, r.Header)
	}
	r.Header = http.Header{}
	if d := p.Authenticate(context.Background(), r, "/"); d.OK() || d.Challenge != `Bearer realm="r"` {
		t.Errorf("missing: %+v", d)
	}
	if _, err := New(Config{JWT: &c, Basic: &BasicConfig{Realm: "r"}}, Shared{}); err == nil {
		t.Error("basic_auth and jwt accepted on one route")
	}
	if _, err := New(Config{JWT: &JWTConfig{Issuer: "x"}}, Shared{}); err == nil {
		t.Error("jwt without keys accepted")
	}
	if _, err := New(Config{JWT: &JWTConfig{Issuer: "x", JWKSURL: "http://127.0.0.1/jwks"}}, Shared{}); err == nil {
		t.Error("http jwks_url accepted")
	}
}

// TestFieldValueAndChallenges: every challenge is a valid RFC 6750 §3
// value (error_description: %x20-21 / %x23-5B / %x5D-7E).
func TestFieldValueAndChallenges(t *testing.T) {
	for p := jwtSeveral; p < jwtProblems; p++ {
		d := jwtDescriptions[p]
		if d == "" || strings.ContainsFunc(d, func(r rune) bool { return r < 0x20 || r > 0x7e || r == '"' || r == '\\' }) {
			t.Errorf("description %d %q", p, d)
		}
	}
	if v, ok := fieldValue([]byte(`"x\u0000"`)); ok {
		t.Errorf("NUL forwarded: %q", v)
	}
	if v, ok := fieldValue([]byte("[1,\n 2]")); !ok || v != "[1,2]" {
		t.Errorf("array: %q", v)
	}
}

// BenchmarkJWTES256Cached is a request with a valid ES256 token seen
// before: the token's SHA-256 and a map lookup instead of the signature
// check (BenchmarkJWTES256Verify), sub forwarded as X-User.
func BenchmarkJWTES256Cached(b *testing.B) {
	clk := testjwt.NewClock(time.Now())
	es := testjwt.ES256("k")
	a := staticJWT(b, clk, map[string]string{"sub": "X-User"}, es)
	h := bearer(es.Sign(testjwt.Claims(clk.Now(), testIssuer, testAudience, "alice")))
	if res, _, _ := a.check(context.Background(), h); res != ResultOK {
		b.Fatal(res)
	}
	b.ReportAllocs()
	for b.Loop() {
		a.check(context.Background(), h)
	}
}

// BenchmarkJWTES256Verify is the first request with a valid ES256 token:
// parse, the ECDSA P-256 signature check (most of it) and the claims.
func BenchmarkJWTES256Verify(b *testing.B) {
	clk := testjwt.NewClock(time.Now())
	es := testjwt.ES256("k")
	a := staticJWT(b, clk, map[string]string{"sub": "X-User"}, es)
	token := es.Sign(testjwt.Claims(clk.Now(), testIssuer, testAudience, "alice"))
	b.ReportAllocs()
	for b.Loop() {
		if _, p, _ := a.verify(context.Background(), token, a.static, clk.Now()); p != jwtOK {
			b.Fatal(p)
		}
	}
}

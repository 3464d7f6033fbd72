package hcl

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/impulse-agent/impulse-agent/internal/testjwt"
)

// TestJWTBlock: a jwt block converts with its defaults (ES256 and RS256,
// 30s of skew, the realm, no forwarded claim), reads its jwks_file, and
// takes a jwks_url with a jwks_ca_file; the HCL and JSON spellings of
// forward_claims give the same map.
func TestJWTBlock(t *testing.T) {
	dir := t.TempDir()
	es := testjwt.ES256("k1")
	set := writeCred(t, dir, "jwks.json", string(testjwt.JWKS(es, testjwt.RS256("k2"))))
	srv := testjwt.NewJWKSServer(t, testjwt.JWKS(es))
	ca := writeCred(t, dir, "ca.pem", string(srv.CertPEM()))

	cfg := mustParse(t, authUpstream(fmt.Sprintf(`    jwt {
      issuer    = "https://id.example"
      audiences = ["api"]
      jwks_file = %q
    }`, set)))
	j := cfg.Upstreams[0].Routes[0].JWT
	if j == nil || j.Issuer != "https://id.example" || !slices.Equal(j.Audiences, []string{"api"}) || j.JWKSFile != set || j.JWKS == nil ||
		j.JWKS.Len() != 2 || !slices.Equal(j.Algorithms, []string{"ES256", "RS256"}) || j.ClockSkew != 30*time.Second ||
		j.Realm != "impulse-agent" || j.ForwardClaims != nil || j.JWKSURL != "" {
		t.Fatalf("jwt = %+v", j)
	}

	cfg = mustParse(t, authUpstream(fmt.Sprintf(`    jwt {
      issuer         = "https://id.example"
      audiences      = ["api", "web"]
      jwks_url       = "https://id.example/.well-known/jwks.json"
      jwks_ca_file   = %q
      algorithms     = ["ES384", "PS256", "EdDSA"]
      forward_claims = { sub = "X-User", "email" = "X-Email" }
      clock_skew     = "0s"
      realm          = "api"
    }`, ca)))
	j = cfg.Upstreams[0].Routes[0].JWT
	if j.JWKSURL != "https://id.example/.well-known/jwks.json" || j.JWKSCAFile != ca || j.JWKSRoots == nil || !j.JWKSRoots.Equal(srv.Pool()) ||
		!slices.Equal(j.Algorithms, []string{"ES384", "PS256", "EdDSA"}) || len(j.ForwardClaims) != 2 || j.ForwardClaims["sub"] != "X-User" ||
		j.ForwardClaims["email"] != "X-Email" || j.ClockSkew != 0 || j.Realm != "api" || j.JWKS != nil {
		t.Errorf("jwt = %+v", j)
	}

	src := strings.ReplaceAll(fmt.Sprintf(`{"listener": {"public": {"address": "127.0.0.1:8443", "tls": {"cert_file": "testdata/certs/cert.pem", "key_file": "testdata/certs/key.pem"}}},
 "upstream": {"api": {"route": {"jwt": {"issuer": "i", "audiences": ["a"], "jwks_file": %q, "forward_claims": {"sub": "X-User"}}},
  "backend": {"b": {"address": "http://127.0.0.1:8080"}}}}}`, set), "\n", "")
	jc, diags := Parse("a.json", []byte(src))
	if diags.HasErrors() {
		t.Fatal(linesOf(diags))
	}
	if j := jc.Upstreams[0].Routes[0].JWT; j == nil || j.ForwardClaims["sub"] != "X-User" || j.JWKS.Len() != 2 {
		t.Errorf("JSON jwt = %+v", j)
	}
}

// TestJWTBlockErrors: every bad value of a jwt block, and every bad
// jwks_file, is an error at file:line:column of its attribute (or block)
// naming the field; HS* and none are refused with their reason; no
// diagnostic quotes key material.
func TestJWTBlockErrors(t *testing.T) {
	dir := t.TempDir()
	es := testjwt.ES256("k1")
	good := writeCred(t, dir, "jwks.json", string(testjwt.JWKS(es)))
	privJSON, _ := jose.JSONWebKey{Key: es.Private, KeyID: "leak"}.MarshalJSON()
	priv := writeCred(t, dir, "priv.json", `{"keys":[`+string(privJSON)+`]}`)
	notSet := writeCred(t, dir, "notset.json", `{"kty":"EC"}`)
	onlyRSA := writeCred(t, dir, "rsa.json", string(testjwt.JWKS(testjwt.RS256("r"))))
	keys := writeCred(t, dir, "keys", "ci:key-0123456789abcdef\n")
	base := func(extra string) string {
		return fmt.Sprintf("jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_file = %q\n%s\n}", good, extra)
	}
	for _, tc := range []struct {
		body, at, want string
	}{
		{base(` algorithms = ["ES256", "HS256"]`), `"HS256"`, `upstream "api" route jwt algorithms: "HS256" is HMAC, a shared secret`},
		{base(` algorithms = ["none"]`), `"none"`, `"none" (an unsecured JWT, RFC 7519 §6) is never accepted (RFC 8725 §3.1)`},
		{base(` algorithms = ["RS1"]`), `"RS1"`, `"RS1" is not a supported algorithm`},
		{base(` algorithms = []`), `[]`, "at least one algorithm is required"},
		{base(` algorithms = ["ES256", "ES256"]`), `["ES256", "ES256"]`, `"ES256" is listed twice`},
		{base(` clock_skew = "10m"`), `"10m"`, `upstream "api" route jwt clock_skew: "10m" is out of range (0s..5m)`},
		{base(` realm = "a\"b"`), `"a\"b"`, "Invalid realm"},
		{base(` forward_claims = { sub = "X User" }`), `"X User"`, "is not a field name"},
		{base(` forward_claims = { sub = "Authorization" }`), `"Authorization"`, "cannot be set on the request"},
		{base(` forward_claims = { sub = "X-Forwarded-For" }`), `"X-Forwarded-For"`, "cannot be set on the request"},
		{base(` forward_claims = { sub = "X-User", email = "x_user" }`), `"x_user"`, `"x_user" already carries claim "sub"`},
		{base(` forward_claims = { "" = "X-User" }`), `""`, "Invalid claim name"},
		{base(` forward_claims = ["sub"]`), `["sub"]`, "a map of claim names to field names is required"},
		{base(` jwks_ca_file = "x"`), `"x"`, "jwks_ca_file is the CA of jwks_url's server; there is no jwks_url"},
		{"jwt {\n audiences = [\"a\"]\n jwks_url = \"https://h/k\"\n}", "jwt {", `upstream "api" route jwt issuer: issuer is required`},
		{"jwt {\n issuer = \"\"\n audiences = [\"a\"]\n jwks_url = \"https://h/k\"\n}", `""`, "issuer is required"},
		{"jwt {\n issuer = \"i\"\n jwks_url = \"https://h/k\"\n}", "jwt {", "audiences is required"},
		{"jwt {\n issuer = \"i\"\n audiences = []\n jwks_url = \"https://h/k\"\n}", "[]", "audiences is required"},
		{"jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n}", "jwt {", "one of jwks_url and jwks_file is required"},
		{fmt.Sprintf("jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_url = \"https://h/k\"\n jwks_file = %q\n}", good), fmt.Sprintf("%q", good), "jwks_url and jwks_file are exclusive"},
		{"jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_url = \"http://h/k\"\n}", `"http://h/k"`, `upstream "api" route jwt jwks_url: the scheme must be https`},
		{"jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_url = \"https://u:p@h/k\"\n}", `"https://u:p@h/k"`, "user info is not allowed"},
		{"jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_url = \"https://h/k\"\n jwks_ca_file = " + fmt.Sprintf("%q", good) + "\n}", fmt.Sprintf("%q", good), "Invalid CA file"},
		{"jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_file = \"\"\n}", `""`, "jwks_file must not be empty"},
		{fmt.Sprintf("jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_file = %q\n}", dir+"/missing"), fmt.Sprintf("%q", dir+"/missing"), "File not found"},
		{fmt.Sprintf("jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_file = %q\n}", priv), fmt.Sprintf("%q", priv), `key 1 (kid "leak"): holds private key material`},
		{fmt.Sprintf("jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_file = %q\n}", notSet), fmt.Sprintf("%q", notSet), `no "keys" array`},
		{fmt.Sprintf("jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_file = %q\n algorithms = [\"ES256\"]\n}", onlyRSA), fmt.Sprintf("%q", onlyRSA), `no key usable with the configured algorithms (ES256): key 1 (kid "r"): its alg "RS256" is not among`},
		{base("") + "\n basic_auth { users_file = \"x\" }", "jwt {", "basic_auth and jwt both read Authorization"},
		{fmt.Sprintf("api_keys {\n keys_file = %q\n header = \"Authorization\"\n}\n", keys) + base(""), "jwt {", "api_keys reads its key from Authorization"},
		{base("") + "\n" + base(""), "2nd jwt {", "Duplicate jwt block"},
	} {
		src := authUpstream("    " + tc.body)
		got := wantErrorAt(t, src, tc.at, tc.want, tc.body)
		if strings.Contains(got, string(privJSON[20:60])) {
			t.Errorf("%s: a diagnostic quotes key material:\n%s", tc.body, got)
		}
	}

	// An empty set refuses everyone: valid, with a warning.
	empty := writeCred(t, dir, "empty.json", `{"keys":[]}`)
	cfg := mustParse(t, authUpstream(fmt.Sprintf("    jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_file = %q\n}", empty)))
	if len(cfg.Warnings) != 1 || !strings.Contains(FormatDiagnostic(cfg.Warnings[0]), "holds none") {
		t.Errorf("empty jwks_file: warnings %s", linesOf(cfg.Warnings))
	}
}

// TestJWTAlgorithmsOneError: a list of algorithms each refused gets one
// error per refused value at that value, and no second "Missing
// algorithms" at the list; a name in the wrong case says which is meant.
// An empty list is the one "Missing algorithms".
func TestJWTAlgorithmsOneError(t *testing.T) {
	dir := t.TempDir()
	good := writeCred(t, dir, "jwks.json", string(testjwt.JWKS(testjwt.ES256("k1"))))
	for _, tc := range []struct {
		algs, at, want string
		errors         int
	}{
		{`["none"]`, `"none"`, `"none" (an unsecured JWT`, 1},
		{`["ES257"]`, `"ES257"`, `"ES257" is not a supported algorithm (`, 1},
		{`["es256"]`, `"es256"`, `"es256" is not a supported algorithm: names are case-sensitive (RFC 7515 §4.1.1), write "ES256"`, 1},
		{`["HS256", "none"]`, `"HS256"`, `"HS256" is HMAC`, 2},
		{`[]`, `[]`, "Missing algorithms", 1},
	} {
		src := authUpstream(fmt.Sprintf("    jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_file = %q\n algorithms = %s\n}", good, tc.algs))
		_, diags := Parse("a.hcl", []byte(src))
		got := linesOf(diags)
		if !strings.Contains(got, "a.hcl:"+posOf(src, tc.at)+": ") || !strings.Contains(got, tc.want) {
			t.Errorf("algorithms = %s:\n%s\nwant an error at a.hcl:%s containing %q", tc.algs, got, posOf(src, tc.at), tc.want)
		}
		if n := len(diags.Errs()); n != tc.errors {
			t.Errorf("algorithms = %s: %d errors, want %d:\n%s", tc.algs, n, tc.errors, got)
		}
		if tc.algs != `[]` && strings.Contains(got, "Missing algorithms") {
			t.Errorf("algorithms = %s: a spurious Missing algorithms:\n%s", tc.algs, got)
		}
	}
}

// TestURLUserInfoNeverEchoed: a jwks_url or forward_auth address with user
// info is refused at its file:line:column without quoting the user info
// (a password or a token), whether the URL parses or not.
func TestURLUserInfoNeverEchoed(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_url = \"https://alice:s3cret@id.example/jwks.json\"\n}",
			`upstream "api" route jwt jwks_url: user info is not allowed; got "https://xxxxx@id.example/jwks.json"`},
		{"jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_url = \"https://alice:s3cret@id.example:bad/k\"\n}", `not a URL; got "https://xxxxx@id.example:bad/k"`},
		{"jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_url = \"http://alice:s3cret@id.example/k\"\n}", `the scheme must be https`},
		{`forward_auth { address = "http://alice:s3cret@a:1/auth" }`, `user info is not allowed (send credentials with copy_request_headers); got "http://xxxxx@a:1/auth"`},
	} {
		src := authUpstream("    " + tc.body)
		_, diags := Parse("a.hcl", []byte(src))
		got := linesOf(diags)
		if !strings.Contains(got, "a.hcl:"+posOf(src, `"`+"http")+": ") || !strings.Contains(got, tc.want) {
			t.Errorf("%s:\n%s\nwant an error at a.hcl:%s containing %q", tc.body, got, posOf(src, `"http`), tc.want)
		}
		if strings.Contains(got, "alice") || strings.Contains(got, "s3cret") {
			t.Errorf("%s: a diagnostic echoes the user info:\n%s", tc.body, got)
		}
	}
	for in, want := range map[string]string{
		"https://h/k":              "https://h/k",
		"https://u@h/k":            "https://xxxxx@h/k",
		"https://u:p@h":            "https://xxxxx@h",
		"https://u:p@x@h/a@b?c@d":  "https://xxxxx@h/a@b?c@d",
		"u:p@h/k":                  "xxxxx@h/k",
		"https://h/k?next=a@b.com": "https://h/k?next=a@b.com",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestJWKSFileBOM: a jwks_file a Windows editor saved with a UTF-8 byte
// order mark is read as the same set.
func TestJWKSFileBOM(t *testing.T) {
	set := writeCred(t, t.TempDir(), "jwks.json", "\xEF\xBB\xBF"+string(testjwt.JWKS(testjwt.ES256("k1"))))
	cfg := mustParse(t, authUpstream(fmt.Sprintf("    jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_file = %q\n}", set)))
	if j := cfg.Upstreams[0].Routes[0].JWT; j.JWKS == nil || j.JWKS.Len() != 1 {
		t.Errorf("jwt = %+v", j)
	}
}

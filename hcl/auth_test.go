package hcl

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/impulse-agent/impulse-agent/internal/testjwt"
)

// authUpstream is an upstream whose route holds body (auth blocks).
func authUpstream(body string) string {
	return testListener + "upstream \"api\" {\n  route {\n" + body + "\n  }\n  backend \"b\" {\n    address = \"http://127.0.0.1:8080\"\n  }\n}\n"
}

// posOf is "line:column" of the first occurrence of s in src (1-based).
func posOf(src, s string) string {
	i := strings.Index(src, s)
	if i < 0 {
		return "?"
	}
	line := strings.Count(src[:i], "\n") + 1
	col := i - strings.LastIndex(src[:i], "\n")
	return fmt.Sprintf("%d:%d", line, col)
}

func writeCred(t *testing.T, dir, name, data string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAuthBlocks: api_keys, basic_auth and forward_auth convert with
// their defaults, and every bad value or credential file is an error at
// file:line:column of its attribute that names the file's line and quotes
// no credential.
func TestAuthBlocks(t *testing.T) {
	dir := t.TempDir()
	hash, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	keys := writeCred(t, dir, "keys", "# comment\nci:key-0123456789abcdef\n\nkey-fedcba9876543210\n")
	users := writeCred(t, dir, "users", "alice:"+string(hash)+"\n")
	cfg := mustParse(t, authUpstream(fmt.Sprintf(`    api_keys { keys_file = %q }
    basic_auth { users_file = %q }
    forward_auth { address = "http://127.0.0.1:4181/auth" }`, keys, users)))
	rt := cfg.Upstreams[0].Routes[0]
	if k := rt.APIKeys; k == nil || k.Header != "X-Api-Key" || len(k.Keys) != 2 || k.Keys[0].Name != "ci" || k.Keys[1].Name != "" {
		t.Errorf("api_keys = %+v", rt.APIKeys)
	}
	if b := rt.BasicAuth; b == nil || b.Realm != DefaultBasicRealm || len(b.Users) != 1 || b.Users[0].Name != "alice" {
		t.Errorf("basic_auth = %+v", rt.BasicAuth)
	}
	if f := rt.ForwardAuth; f == nil || f.Address != "http://127.0.0.1:4181/auth" || f.Timeout != 2*time.Second || f.CopyRequestHeaders != nil || f.CopyResponseHeaders != nil {
		t.Errorf("forward_auth = %+v", rt.ForwardAuth)
	}
	if s := fmt.Sprintf("%v %+v", rt.APIKeys.Keys, rt.BasicAuth.Users); strings.Contains(s, string(hash)) {
		t.Errorf("a user formats with its hash: %s", s)
	}

	bad := map[string]string{
		"shortkey":  "ci:short\n",
		"dupkey":    "a:key-0123456789abcdef\nb:key-0123456789abcdef\n",
		"plainuser": "alice:pw-in-clear\n",
		"md5user":   "alice:$apr1$abc$def\n",
		"nocolon":   "alice\n",
		"costuser":  "# cost 31: minutes per check\nalice:" + string(hash[:4]) + "31" + string(hash[6:]) + "\n",
	}
	files := map[string]string{}
	for name, data := range bad {
		files[name] = writeCred(t, dir, name, data)
	}
	for _, tc := range []struct {
		body, at, want string
	}{
		{fmt.Sprintf("api_keys { keys_file = %q }", files["shortkey"]), fmt.Sprintf("%q", files["shortkey"]),
			"Invalid keys_file: upstream \"api\" route api_keys keys_file: " + files["shortkey"] + ":1: a key must be 16 to 512 bytes long."},
		{fmt.Sprintf("api_keys { keys_file = %q }", files["dupkey"]), fmt.Sprintf("%q", files["dupkey"]), ":2: the same key as line 1."},
		{fmt.Sprintf("basic_auth { users_file = %q }", files["plainuser"]), fmt.Sprintf("%q", files["plainuser"]), ":1: user \"alice\": not a bcrypt hash"},
		{fmt.Sprintf("basic_auth { users_file = %q }", files["md5user"]), fmt.Sprintf("%q", files["md5user"]), "not a bcrypt hash"},
		{fmt.Sprintf("basic_auth { users_file = %q }", files["nocolon"]), fmt.Sprintf("%q", files["nocolon"]), ":1: not USER:HASH."},
		{fmt.Sprintf("basic_auth { users_file = %q }", files["costuser"]), fmt.Sprintf("%q", files["costuser"]), ":2: user \"alice\": bcrypt cost 31 is over the maximum of 14 (about 1 s of CPU per check"},
		{fmt.Sprintf("basic_auth { users_file = %q }", dir+"/missing"), fmt.Sprintf("%q", dir+"/missing"), "File not found"},
		{fmt.Sprintf("basic_auth { users_file = %q }", dir), fmt.Sprintf("%q", dir), "is a directory"},
		{"basic_auth { }", "basic_auth", "Missing users_file"},
		{`basic_auth { users_file = "" }`, `""`, "must not be empty"},
		{fmt.Sprintf("basic_auth {\n users_file = %q\n realm = \"a\\\"b\"\n}", users), `"a\"b"`, "Invalid realm"},
		{"api_keys { }", "api_keys", "Missing keys_file"},
		{fmt.Sprintf("api_keys {\n keys_file = %q\n header = \"X Key\"\n}", keys), `"X Key"`, "is not a field name"},
		{fmt.Sprintf("api_keys {\n keys_file = %q\n header = \"Host\"\n}", keys), `"Host"`, "cannot carry an API key"},
		{fmt.Sprintf("api_keys {\n keys_file = %q\n header = \"X-Forwarded-For\"\n}", keys), `"X-Forwarded-For"`, "cannot carry an API key"},
		{fmt.Sprintf("api_keys {\n keys_file = %q\n header = \"forwarded\"\n}", keys), `"forwarded"`, "cannot carry an API key"},
		{fmt.Sprintf("api_keys {\n keys_file = %q\n header = \"Keep-Alive\"\n}", keys), `"Keep-Alive"`, "cannot carry an API key"},
		{fmt.Sprintf("api_keys {\n keys_file = %q\n header = \"TE\"\n}", keys), `"TE"`, "cannot carry an API key"},
		{"forward_auth {\n address = \"http://a:1\"\n copy_request_headers = [\"Cookie\", \"Content-Length\"]\n}", `"Content-Length"`, "cannot be copied to the auth service"},
		{"forward_auth {\n address = \"http://a:1\"\n copy_request_headers = [\"Host\"]\n}", `"Host"`, "cannot be copied to the auth service"},
		{"forward_auth {\n address = \"http://a:1\"\n copy_request_headers = [\"connection\"]\n}", `"connection"`, "cannot be copied to the auth service"},
		{"forward_auth {\n address = \"http://a:1\"\n copy_response_headers = [\"Upgrade\"]\n}", `"Upgrade"`, "cannot be set on the request"},
		{"forward_auth { }", "forward_auth", "Missing address"},
		{`forward_auth { address = "tcp://a:1" }`, `"tcp://a:1"`, "the scheme must be http or https"},
		{`forward_auth { address = "http://u:p@a:1" }`, `"http://u:p@a:1"`, "user info is not allowed"},
		{`forward_auth { address = "/auth" }`, `"/auth"`, "the scheme must be http or https"},
		{"forward_auth {\n address = \"http://a:1\"\n timeout = \"0s\"\n}", `"0s"`, "Duration out of range"},
		{"forward_auth {\n address = \"http://a:1\"\n timeout = \"2m\"\n}", `"2m"`, "Duration out of range"},
		{"forward_auth {\n address = \"http://a:1\"\n copy_response_headers = [\"X User\"]\n}", `"X User"`, "is not a field name"},
		{"forward_auth {\n address = \"http://a:1\"\n copy_request_headers = [\"\"]\n}", `""`, "is not a field name"},
		{"forward_auth {\n address = \"http://a:1\"\n}\n forward_auth {\n address = \"http://a:1\"\n}", "2nd forward_auth {", "Duplicate forward_auth block"},
	} {
		src := authUpstream("    " + tc.body)
		got := wantErrorAt(t, src, tc.at, tc.want, tc.body)
		if strings.Contains(got, "key-0123456789abcdef") || strings.Contains(got, "pw-in-clear") || strings.Contains(got, "$apr1$") || strings.Contains(got, string(hash[7:])) {
			t.Errorf("%s: a diagnostic quotes a credential:\n%s", tc.body, got)
		}
	}

	// An empty file admits nobody: valid, with a warning.
	empty := writeCred(t, dir, "empty", "# nobody yet\n")
	cfg = mustParse(t, authUpstream(fmt.Sprintf("    api_keys { keys_file = %q }", empty)))
	if len(cfg.Warnings) != 1 || !strings.Contains(FormatDiagnostic(cfg.Warnings[0]), "holds none") {
		t.Errorf("empty keys file: warnings %s", linesOf(cfg.Warnings))
	}
}

// TestFullExampleAuth: full.hcl's upstream "admin" writes out every auth
// argument with its default.
func TestFullExampleAuth(t *testing.T) {
	cfg, diags := Load([]string{"testdata/good/full.hcl"})
	if diags.HasErrors() {
		t.Fatal(linesOf(diags))
	}
	rt := cfg.Upstreams[1].Routes[0]
	if k := rt.APIKeys; k == nil || k.Header != DefaultAPIKeyHeader || len(k.Keys) != 1 || k.Keys[0].Name != "ci" {
		t.Errorf("api_keys = %+v", rt.APIKeys)
	}
	if b := rt.BasicAuth; b == nil || b.Realm != DefaultBasicRealm || len(b.Users) != 1 {
		t.Errorf("basic_auth = %+v", rt.BasicAuth)
	}
	if f := rt.ForwardAuth; f == nil || f.Timeout != DefaultForwardAuthTimeout || len(f.CopyRequestHeaders) != 0 || len(f.CopyResponseHeaders) != 0 {
		t.Errorf("forward_auth = %+v", rt.ForwardAuth)
	}
	j := cfg.Upstreams[1].Routes[1].JWT
	if j == nil || j.JWKS == nil || j.JWKS.Len() != 1 || j.ClockSkew != DefaultJWTClockSkew || j.Realm != DefaultBasicRealm ||
		len(j.Algorithms) != 2 || len(j.ForwardClaims) != 0 || j.Issuer != "https://id.example.com" {
		t.Errorf("jwt = %+v", j)
	}
}

// TestReservedFieldSpellings: a reserved, hop-by-hop or framing field
// written with "_" for "-" (and in any case) is refused wherever a field
// name is configured, as its "-" spelling is: CGI, WSGI and PHP backends
// read both as one variable, and the gateway strips every spelling. The
// error is at file:line:column of the value and names the field; names
// that only look alike ("X_Api_Key", "X-Request_Ids") are still accepted.
func TestReservedFieldSpellings(t *testing.T) {
	dir := t.TempDir()
	keys := writeCred(t, dir, "keys", "ci:key-0123456789abcdef\n")
	jwks := writeCred(t, dir, "jwks.json", string(testjwt.JWKS(testjwt.ES256("k1"))))
	apiKey := func(h string) string { return fmt.Sprintf("api_keys {\n keys_file = %q\n header = %q\n}", keys, h) }
	claims := func(m string) string {
		return fmt.Sprintf("jwt {\n issuer = \"i\"\n audiences = [\"a\"]\n jwks_file = %q\n forward_claims = %s\n}", jwks, m)
	}
	for _, tc := range []struct {
		body, at, want string
	}{
		{apiKey("X_Forwarded_For"), `"X_Forwarded_For"`, `upstream "api" route api_keys header: "X_Forwarded_For" cannot carry an API key`},
		{apiKey("x_forwarded_proto"), `"x_forwarded_proto"`, `read as "x-forwarded-proto"`},
		{apiKey("Transfer_Encoding"), `"Transfer_Encoding"`, "cannot carry an API key"},
		{apiKey("content_length"), `"content_length"`, "cannot carry an API key"},
		{apiKey("X_REQUEST_ID"), `"X_REQUEST_ID"`, "cannot carry an API key"},
		{apiKey("Keep_Alive"), `"Keep_Alive"`, "cannot carry an API key"},
		{apiKey("proxy_authorization"), `"proxy_authorization"`, "cannot carry an API key"},
		{"forward_auth {\n address = \"http://a:1\"\n copy_response_headers = [\"X-User\", \"x_request_id\"]\n}", `"x_request_id"`,
			`upstream "api" route forward_auth copy_response_headers: "x_request_id" cannot be set on the request`},
		{"forward_auth {\n address = \"http://a:1\"\n copy_response_headers = [\"Transfer_Encoding\"]\n}", `"Transfer_Encoding"`, "cannot be set on the request"},
		{"forward_auth {\n address = \"http://a:1\"\n copy_request_headers = [\"proxy_connection\"]\n}", `"proxy_connection"`,
			`upstream "api" route forward_auth copy_request_headers: "proxy_connection" cannot be copied to the auth service`},
		{"forward_auth {\n address = \"http://a:1\"\n copy_request_headers = [\"HTTP2_Settings\"]\n}", `"HTTP2_Settings"`, "cannot be copied to the auth service"},
		{claims(`{ sub = "x_forwarded_for" }`), `"x_forwarded_for"`, `upstream "api" route jwt forward_claims: "x_forwarded_for" cannot be set on the request`},
		{claims(`{ e = "transfer_encoding" }`), `"transfer_encoding"`, `"transfer_encoding" cannot be set on the request`},
		{claims(`{ sub = "X_Request_Id" }`), `"X_Request_Id"`, "cannot be set on the request"},
	} {
		src := authUpstream("    " + tc.body)
		_, diags := Parse("a.hcl", []byte(src))
		got := linesOf(diags)
		at := posOf(src, tc.at)
		if !diags.HasErrors() || !strings.Contains(got, "a.hcl:"+at+": ") || !strings.Contains(got, tc.want) {
			t.Errorf("%s:\n%s\nwant an error at a.hcl:%s containing %q", tc.body, got, at, tc.want)
		}
		if n := strings.Count(got, "a.hcl:"); n != 1 {
			t.Errorf("%s: %d diagnostics, want 1:\n%s", tc.body, n, got)
		}
	}

	cfg := mustParse(t, authUpstream(apiKey("X_Api_Key")+"\n"+
		"forward_auth {\n address = \"http://a:1\"\n copy_request_headers = [\"X_Tenant\"]\n copy_response_headers = [\"X-Request_Ids\"]\n}\n"+
		claims(`{ sub = "X_User" }`)))
	rt := cfg.Upstreams[0].Routes[0]
	if rt.APIKeys.Header != "X_Api_Key" || rt.ForwardAuth.CopyResponseHeaders[0] != "X-Request_Ids" || rt.JWT.ForwardClaims["sub"] != "X_User" {
		t.Errorf("route = %+v %+v %+v", rt.APIKeys, rt.ForwardAuth, rt.JWT)
	}
}

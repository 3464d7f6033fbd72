package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testjwt"
)

// TestA05JWTAgent: case A05 through the agent process, its jwt blocks as
// written in HCL, over h1, h2 and h3. A jwks_file route: a valid token
// reaches the backend with sub as X-User and without Authorization, a
// forged or expired one gets 401 with its challenge; a SIGHUP after the
// file's key was rotated makes the old key's tokens fail and the new
// one's pass; a SIGHUP with a file holding a private key is rejected at
// the jwks_file attribute's file:line:column and the running keys stay.
// A jwks_url route with a jwks_ca_file fetches the set over HTTPS. No
// token appears in the logs (debug, access log included), /metrics, the
// /v1/* endpoints, the status page or the reload diagnostics.
func TestA05JWTAgent(t *testing.T) {
	k1, k2 := testjwt.ES256("k1"), testjwt.ES256("k2")
	remote := testjwt.NewJWKSServer(t, testjwt.JWKS(k2))
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "user=%s authorization=%q", r.Header.Get("X-User"), r.Header.Get("Authorization"))
	}))
	t.Cleanup(be.Close)
	dir := t.TempDir()
	jwksFile, caFile := filepath.Join(dir, "jwks.json"), filepath.Join(dir, "jwks-ca.pem")
	write := func(p string, data []byte) {
		t.Helper()
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(jwksFile, testjwt.JWKS(k1))
	write(caFile, remote.CertPEM())
	const iss, aud = "https://id.a05.example", "api"
	cfg := baseHCL() + fmt.Sprintf(`
access_log {}

upstream "api" {
  route {
    path_prefix = "/file/"
    jwt {
      issuer         = %[1]q
      audiences      = [%[2]q]
      jwks_file      = %[3]q
      forward_claims = { sub = "X-User" }
    }
  }
  route {
    path_prefix = "/url/"
    jwt {
      issuer         = %[1]q
      audiences      = [%[2]q]
      jwks_url       = %[4]q
      jwks_ca_file   = %[5]q
      forward_claims = { sub = "X-User" }
    }
  }
  backend "a05" {
    address = %[6]q
  }
}
`, iss, aud, jwksFile, remote.URL(), caFile, be.URL)
	a := startAgent(t, cfg, "-log-level=debug")
	clients := authClients(t)

	var seen strings.Builder // every answer the test got
	var tokens []string
	token := func(s *testjwt.Signer, claims map[string]any) string {
		tok := s.Sign(claims)
		tokens = append(tokens, tok)
		return tok
	}
	valid := func(s *testjwt.Signer) string { return token(s, testjwt.Claims(time.Now(), iss, aud, "alice")) }
	do := func(c *http.Client, path, tok string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", a.URL(path), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("X-User", "forged")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(&seen, "%s %d %v %s\n", path, resp.StatusCode, resp.Header, b)
		return resp.StatusCode, string(b), resp.Header.Get("Www-Authenticate")
	}
	expect := func(when, path, tok string, want int, wantText string) {
		t.Helper()
		for proto, c := range clients {
			status, body, challenge := do(c, path, tok)
			if status != want || !strings.Contains(body+challenge, wantText) {
				t.Errorf("%s, %s, %s: %d %q %q, want %d with %q", when, proto, path, status, body, challenge, want, wantText)
			}
		}
	}
	expired := testjwt.Claims(time.Now().Add(-time.Hour), iss, aud, "alice")
	expect("at start", "/file/x", valid(k1), 200, `user=alice authorization=""`)
	expect("at start", "/file/x", token(k1, expired), 401, `error="invalid_token", error_description="token expired"`)
	expect("at start", "/file/x", k1.HS256WithPublicKey(testjwt.Claims(time.Now(), iss, aud, "alice")), 401, "signature algorithm not accepted")
	expect("at start", "/file/x", valid(k2), 401, "unknown signing key")
	expect("at start", "/url/x", valid(k2), 200, "user=alice")

	// The file rotated to k2: a SIGHUP reads it.
	write(jwksFile, testjwt.JWKS(k2))
	a.Signal(syscall.SIGHUP)
	a.waitLog(10*time.Second, "configuration reloaded", nil)
	expect("after the rotation", "/file/x", valid(k1), 401, "unknown signing key")
	expect("after the rotation", "/file/x", valid(k2), 200, "user=alice")

	// A file with a private key: the reload is rejected, k2 stays.
	priv, err := k1.JWKPrivateJSON()
	if err != nil {
		t.Fatal(err)
	}
	write(jwksFile, []byte(`{"keys":[`+priv+`]}`))
	a.Signal(syscall.SIGHUP)
	rejected := a.waitLog(10*time.Second, "reload rejected; keeping the running configuration", nil)
	if d, _ := rejected["diagnostic"].(string); !strings.Contains(d, a.ConfigPath+":") || !strings.Contains(d, `jwt jwks_file: "`+jwksFile+`": key 1 (kid "k1"): holds private key material`) {
		t.Errorf("reload diagnostic %q: want the config's file:line:column and the key set's reason", d)
	}
	if code, body := a.control("POST", "/v1/reload", nil); code != 400 {
		t.Errorf("POST /v1/reload with a bad jwks_file: %d %s", code, body)
	} else {
		fmt.Fprintf(&seen, "reload %s\n", body)
	}
	expect("after a bad reload", "/file/x", valid(k2), 200, "user=alice")

	var metricsText string
	for _, p := range []string{"/metrics", "/v1/health", "/v1/ready", "/v1/upstreams", "/v1/backends", "/v1/routes", "/v1/status", "/ui/"} {
		code, body := a.control("GET", p, nil)
		if code != 200 {
			t.Errorf("GET %s: %d", p, code)
		}
		fmt.Fprintf(&seen, "%s %s\n", p, body)
		if p == "/metrics" {
			metricsText = string(body)
		}
	}
	for _, want := range []string{`impulse_auth{method="jwt",result="ok",route="/file/"}`, `impulse_auth{method="jwt",result="denied",route="/file/"}`,
		`impulse_auth{method="jwt",result="ok",route="/url/"}`} {
		if !strings.Contains(metricsText, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	logs := a.Logs()
	if !strings.Contains(logs, `"auth":"jwt:ok","auth_subject":"alice"`) || !strings.Contains(logs, `"auth":"jwt:denied"`) {
		t.Errorf("the access log lacks the auth fields:\n%s", grepLines(logs, `"auth"`))
	}
	for _, tok := range tokens {
		sig := tok[strings.LastIndex(tok, ".")+1:]
		if strings.Contains(logs, sig) {
			t.Errorf("a token is in the logs:\n%s", grepLines(logs, sig))
		}
		if strings.Contains(seen.String(), sig) {
			t.Errorf("a token is in an answer:\n%s", grepLines(seen.String(), sig))
		}
	}
	var privKey struct{ D string }
	if err := json.Unmarshal([]byte(priv), &privKey); err != nil || privKey.D == "" {
		t.Fatalf("private JWK without d: %v", err)
	}
	if strings.Contains(logs, privKey.D) || strings.Contains(seen.String(), privKey.D) {
		t.Error("the private key of the rejected jwks_file was quoted")
	}
	if !strings.Contains(logs, `"@level":"debug"`) {
		t.Error("no debug line was logged: the check did not cover debug logging")
	}
}

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testjwt"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// TestSecuritySecretsNeverLeak backs SECURITY.md's claim that the Consul
// ACL token, the control token and clients' bearer tokens (a jwt route's,
// valid and refused) never appear in the logs (at debug level, access log
// included), the metrics, the control API's answers (successes, refusals
// and reload diagnostics) or the gateway's own answers, including while
// Consul refuses the token and while a reload fails on the line that
// holds it.
func TestSecuritySecretsNeverLeak(t *testing.T) {
	const mgmt = "0b9c8d7e-6f5a-4b3c-9d2e-1f0a9b8c7d6e"
	c := consultest.Start(t, consultest.WithACLs(mgmt))
	consulToken := c.CreateToken(t, "web-read", "service \"web\" { policy = \"read\" }\nnode_prefix \"\" { policy = \"read\" }")
	const controlToken = "ctl-5e3f1a2b-secret-9c8d"
	be := newHTTP1Backend(t, "sec-1")
	c.RegisterTTL(t, "sec-1", "web", "127.0.0.1", be.Port, nil, map[string]string{"impulse-scheme": "http"})

	dir := t.TempDir()
	ctlFile := filepath.Join(dir, "control.token")
	if err := os.WriteFile(ctlFile, []byte(controlToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	signer := testjwt.ES256("sec")
	jwksFile := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(jwksFile, testjwt.JWKS(signer), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := baseHCL() + "access_log {}\n" + consulUpstreamHCL(c.Addr(), "web", "", "") + fmt.Sprintf(`
upstream "tokens" {
  route {
    path_prefix = "/tokens/"
    jwt {
      issuer    = "https://id.sec.example"
      audiences = ["api"]
      jwks_file = %q
    }
  }
  backend "sec-1" {
    address = %q
  }
}
`, jwksFile, be.URL)
	cfg = strings.Replace(cfg, `wait    = "5s"`, fmt.Sprintf("wait    = \"1s\"\n  token = %q", consulToken), 1)
	cfg = strings.Replace(cfg, "control {\n", fmt.Sprintf("control {\n  token_file = %q\n", ctlFile), 1)
	a := startAgent(t, cfg, "-log-level=debug")
	client, _ := newH3Client(t)
	waitFor(t, 15*time.Second, "traffic with the Consul token", func() bool {
		r, err := get(client, a.URL("/"))
		return err == nil && r.Status == 200
	})

	var seen strings.Builder // every answer body and header the test got
	ctl := func(method, path, token string, body io.Reader) int {
		req, _ := http.NewRequest(method, a.ControlURL+path, body)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(&seen, "%s %s %d %v\n%s\n", method, path, resp.StatusCode, resp.Header, b)
		return resp.StatusCode
	}
	paths := []string{"/v1/health", "/v1/ready", "/v1/upstreams", "/v1/backends", "/v1/routes", "/metrics"}
	for _, p := range paths {
		if code := ctl("GET", p, controlToken, nil); code != 200 {
			t.Errorf("GET %s with the token: %d", p, code)
		}
		ctl("GET", p, "", nil)
		ctl("GET", p, controlToken+"x", nil)
		ctl("GET", p, consulToken, nil)
	}

	// A reload that fails at the line holding the Consul token: the
	// diagnostics name the place, not the value.
	bad := strings.Replace(cfg, fmt.Sprintf("token = %q", consulToken), fmt.Sprintf("token = %q\n  token_file = %q", consulToken, ctlFile), 1)
	if err := os.WriteFile(a.ConfigPath, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := ctl("POST", "/v1/reload", controlToken, nil); code != 400 {
		t.Errorf("reload of a conflicting token config: %d, want 400", code)
	}
	if err := os.WriteFile(a.ConfigPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}

	// Consul refusing the token: errors are logged and reported, the token
	// is not.
	c.RevokeToken(t, consulToken)
	waitFor(t, 15*time.Second, "/v1/ready to report the refused token", func() bool {
		req, _ := http.NewRequest("GET", a.ControlURL+"/v1/ready", nil)
		req.Header.Set("Authorization", "Bearer "+controlToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(&seen, "ready %d\n%s\n", resp.StatusCode, b)
		return strings.Contains(string(b), "ACL")
	})
	for _, p := range paths {
		ctl("GET", p, controlToken, nil)
	}
	for _, path := range []string{"/", "/missing", "/%zz"} {
		if r, err := get(client, a.URL(path)); err == nil {
			fmt.Fprintf(&seen, "GET %s %d %v %s\n", path, r.Status, r.Header, r.Body)
		}
	}
	// Bearer tokens: a valid one, an expired one, one of an unknown key.
	good := testjwt.Claims(time.Now(), "https://id.sec.example", "api", "sec-user")
	bearers := map[string]string{"valid bearer token": signer.Sign(good),
		"expired bearer token":  signer.Sign(testjwt.Claims(time.Now().Add(-time.Hour), "https://id.sec.example", "api", "sec-user")),
		"unknown bearer token":  testjwt.ES256("other").Sign(good),
		"none-alg bearer token": testjwt.Unsigned("sec", good)}
	for name, tok := range bearers {
		req, _ := http.NewRequest("GET", a.URL("/tokens/x"), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Fprintf(&seen, "GET /tokens/x %d %v %s\n", resp.StatusCode, resp.Header, b)
		if want := map[bool]int{true: 200, false: 401}[name == "valid bearer token"]; resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", name, resp.StatusCode, want)
		}
	}
	for _, p := range append(paths, "/v1/status") {
		ctl("GET", p, controlToken, nil)
	}

	logs := a.Logs()
	secrets := map[string]string{"Consul token": consulToken, "control token": controlToken}
	for name, tok := range bearers {
		secrets[name] = tok
		secrets[name+"'s signature"] = tok[strings.LastIndex(tok, ".")+1:]
	}
	if !strings.Contains(logs, `"auth":"jwt:ok","auth_subject":"sec-user"`) {
		t.Errorf("the access log lacks the jwt request:\n%s", grepLines(logs, `"auth"`))
	}
	for name, secret := range secrets {
		if secret == "" {
			continue
		}
		if strings.Contains(logs, secret) {
			t.Errorf("the %s is in the logs:\n%s", name, grepLines(logs, secret))
		}
		if strings.Contains(seen.String(), secret) {
			t.Errorf("the %s is in an answer:\n%s", name, grepLines(seen.String(), secret))
		}
	}
	if !strings.Contains(logs, `"@level":"debug"`) {
		t.Error("no debug line was logged: the check did not cover debug logging")
	}
}

package e2e

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// authClients are a client per ingress protocol (h1, h2, h3) trusting the
// package certificate.
func authClients(t *testing.T) map[string]*http.Client {
	h3, _ := newH3Client(t)
	out := map[string]*http.Client{"h3": h3}
	for _, p := range []string{"h1", "h2"} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool}, Protocols: new(http.Protocols)}
		if p == "h1" {
			tr.Protocols.SetHTTP1(true)
		} else {
			tr.Protocols.SetHTTP2(true)
		}
		t.Cleanup(tr.CloseIdleConnections)
		out[p] = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	return out
}

// TestA07ReloadAndNoLeak: case A07 through the agent process. API keys
// and basic credentials are checked over h1, h2 and h3; a SIGHUP that
// removes a key makes it stop working; a SIGHUP with a malformed keys
// file is rejected (file:line:column, the running keys stay); no key,
// password, hash or encoded credential appears in the logs at debug level
// (access log included), /metrics, the /v1/* endpoints, the status page
// or the reload diagnostics.
func TestA07ReloadAndNoLeak(t *testing.T) {
	const (
		keyCI    = "ci-key-A07-5f2e9d1c7b3a"
		keyOps   = "ops-key-A07-8a4c6e2f0d1b"
		password = "alice-pw-A07-7c1d"
	)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	be := newHTTP1Backend(t, "a07")
	dir := t.TempDir()
	keysFile, usersFile := filepath.Join(dir, "keys"), filepath.Join(dir, "users")
	write := func(p, data string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(keysFile, "ci:"+keyCI+"\nops:"+keyOps+"\n")
	write(usersFile, "alice:"+string(hash)+"\n")
	cfg := baseHCL() + fmt.Sprintf(`
access_log {}

upstream "api" {
  route {
    path_prefix = "/keys/"
    api_keys {
      keys_file = %q
    }
  }
  route {
    path_prefix = "/basic/"
    basic_auth {
      users_file = %q
    }
  }
  backend "a07" {
    address = %q
  }
}
`, keysFile, usersFile, be.URL)
	a := startAgent(t, cfg, "-log-level=debug")
	clients := authClients(t)

	var seen strings.Builder // every answer the test got
	do := func(c *http.Client, path string, hdr http.Header) int {
		t.Helper()
		req, _ := http.NewRequest("GET", a.URL(path), nil)
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Fprintf(&seen, "%s %d %v %s\n", path, resp.StatusCode, resp.Header, b)
		return resp.StatusCode
	}
	key := func(k string) http.Header { return http.Header{"X-Api-Key": {k}} }
	basic := func(user, pw string) http.Header {
		r, _ := http.NewRequest("GET", "/", nil)
		r.SetBasicAuth(user, pw)
		return r.Header
	}
	expect := func(when string, checks map[string]struct {
		hdr  http.Header
		want int
	}) {
		t.Helper()
		for proto, c := range clients {
			for name, ch := range checks {
				path := "/keys/x"
				if strings.HasPrefix(name, "basic") {
					path = "/basic/x"
				}
				if got := do(c, path, ch.hdr); got != ch.want {
					t.Errorf("%s, %s, %s: %d, want %d", when, proto, name, got, ch.want)
				}
			}
		}
	}
	type check = struct {
		hdr  http.Header
		want int
	}
	expect("at start", map[string]check{
		"key ci": {key(keyCI), 200}, "key ops": {key(keyOps), 200}, "wrong key": {key(keyCI + "x"), 401}, "no key": {nil, 401},
		"basic ok": {basic("alice", password), 200}, "basic wrong": {basic("alice", password+"x"), 401}, "basic none": {nil, 401},
	})

	// A reload that removes the ops key: it stops working at once.
	write(keysFile, "ci:"+keyCI+"\n")
	a.Signal(syscall.SIGHUP)
	a.waitLog(10*time.Second, "configuration reloaded", nil)
	expect("after removing ops", map[string]check{"key ci": {key(keyCI), 200}, "key ops": {key(keyOps), 401}})

	// A reload with a malformed keys file is rejected; the keys stay.
	write(keysFile, "ci:"+keyCI+"\nops:short\n")
	a.Signal(syscall.SIGHUP)
	rejected := a.waitLog(10*time.Second, "reload rejected; keeping the running configuration", nil)
	if d, _ := rejected["diagnostic"].(string); !strings.Contains(d, a.ConfigPath+":") || !strings.Contains(d, keysFile+":2: a key must be") {
		t.Errorf("reload diagnostic %q: want the config's file:line:column and the keys file's line", d)
	}
	if code, body := a.control("POST", "/v1/reload", nil); code != 400 {
		t.Errorf("POST /v1/reload with a bad keys file: %d %s", code, body)
	} else {
		fmt.Fprintf(&seen, "reload %s\n", body)
	}
	expect("after a bad reload", map[string]check{"key ci": {key(keyCI), 200}, "key ops": {key(keyOps), 401}})

	// Everything an operator can read.
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
	for _, want := range []string{`impulse_auth{method="api_key",result="ok",route="/keys/"}`, `impulse_auth{method="basic",result="denied",route="/basic/"}`} {
		if !strings.Contains(metricsText, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	logs := a.Logs()
	if !strings.Contains(logs, `"auth":"api_key:ok","auth_subject":"ci"`) || !strings.Contains(logs, `"auth":"basic:denied"`) {
		t.Errorf("the access log lacks the auth fields:\n%s", grepLines(logs, `"auth"`))
	}
	b64 := strings.TrimPrefix(basic("alice", password).Get("Authorization"), "Basic ")
	for name, secret := range map[string]string{"ci key": keyCI, "ops key": keyOps, "password": password, "hash": string(hash), "basic credentials": b64} {
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

// TestA06ForwardAuthAgent: case A06 through the agent process, its
// forward_auth block as written in HCL, over h1, h2 and h3: an auth service
// (a real HTTP server) that allows with X-User, refuses with 401 and a
// body, redirects with 302, or hangs; the backend sees only the allowed
// requests, with X-User.
func TestA06ForwardAuthAgent(t *testing.T) {
	release := make(chan struct{})
	authSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch uri := r.Header.Get("X-Forwarded-Uri"); {
		case strings.HasPrefix(uri, "/allow"):
			w.Header().Set("X-User", "bob")
		case strings.HasPrefix(uri, "/deny"):
			w.WriteHeader(401)
			io.WriteString(w, "no entry")
		case strings.HasPrefix(uri, "/login"):
			w.Header().Set("Location", "https://login.example/")
			w.WriteHeader(302)
		case strings.HasPrefix(uri, "/hang"):
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	t.Cleanup(func() { close(release); authSrv.Close() })
	var mu sync.Mutex
	var users []string
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		users = append(users, r.URL.Path+" "+r.Header.Get("X-User"))
		mu.Unlock()
		io.WriteString(w, "backend")
	}))
	t.Cleanup(be.Close)
	cfg := baseHCL() + fmt.Sprintf(`
upstream "app" {
  route {
    path_prefix = "/"
    forward_auth {
      address               = %q
      copy_response_headers = ["X-User"]
      timeout               = "500ms"
    }
  }
  backend "b" {
    address = %q
  }
}
`, authSrv.URL+"/verify", be.URL)
	a := startAgent(t, cfg)
	for proto, c := range authClients(t) {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		for path, want := range map[string]struct {
			status int
			body   string
			field  [2]string
		}{
			"/allow": {200, "backend", [2]string{}},
			"/deny":  {401, "no entry", [2]string{"X-Impulse-Error", ""}},
			"/login": {302, "", [2]string{"Location", "https://login.example/"}},
			"/hang":  {503, "Service Unavailable: auth_unavailable\n", [2]string{"X-Impulse-Error", "auth_unavailable"}},
		} {
			req, _ := http.NewRequest("GET", a.URL(path), nil)
			req.Header.Set("X-User", "forged")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", proto, path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != want.status || string(b) != want.body || want.field[0] != "" && resp.Header.Get(want.field[0]) != want.field[1] {
				t.Errorf("%s %s: %d %q %v, want %d %q %v", proto, path, resp.StatusCode, b, resp.Header, want.status, want.body, want.field)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(users) != 3 {
		t.Fatalf("the backend got %v, want one /allow per protocol", users)
	}
	for _, u := range users {
		if u != "/allow bob" {
			t.Errorf("the backend got %q, want \"/allow bob\"", u)
		}
	}
}

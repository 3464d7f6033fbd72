package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// writeConfig writes a certificate, its key and config (a template as in
// start: %[1]s and %[2]s are the certificate and key files) into a
// temporary directory and returns the configuration file.
func writeConfig(t *testing.T, config string) (cfgFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, cert.CertPEM, 0o600)
	os.WriteFile(keyFile, cert.KeyPEM, 0o600)
	cfgFile = filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(config, certFile, keyFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgFile, certFile, keyFile
}

// startErr runs New then Run on config and returns the error and what was
// reported on the log output.
func startErr(t *testing.T, config string, edit func(cfgFile, certFile, keyFile string), beforeRun func()) (error, string) {
	t.Helper()
	cfgFile, certFile, keyFile := writeConfig(t, config)
	if edit != nil {
		edit(cfgFile, certFile, keyFile)
	}
	logs := &syncBuffer{}
	a, err := New(Options{ConfigPaths: []string{cfgFile}, LogOutput: logs})
	if err != nil {
		return err, logs.String()
	}
	beforeRun()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if err == nil {
		t.Fatalf("Run succeeded; want a start error\n%s", logs)
	}
	return err, logs.String()
}

// TestStartErrorsNameTheField: bind, TLS and token_file failures found
// when the agent starts read like validate's diagnostics (TLS files may
// already be refused by the configuration check, in the same form):
// file:line:column of the value at fault, the summary, the field, the
// reason; and are reported on the log output in that form.
func TestStartErrorsNameTheField(t *testing.T) {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	const cfg = `control {
  address = "CONTROL"
  EXTRA
}
listener "main" {
  address = "LISTEN"
  tls {
    cert_file = %[1]q
    key_file  = %[2]q
  }
}
`
	conf := func(control, controlExtra, listen string) string {
		return strings.NewReplacer("CONTROL", control, "EXTRA", controlExtra, "LISTEN", listen).Replace(cfg)
	}
	other, _ := selfsigned.New("other.example")
	tokenFile := filepath.Join(t.TempDir(), "token")
	for _, tc := range []struct {
		name, config string
		edit         func(cfgFile, certFile, keyFile string)
		want         string // regexp after "gateway.hcl:"
	}{
		{"listener address in use", conf("127.0.0.1:0", "", udp.LocalAddr().String()), nil,
			`^6:13: Cannot bind listener address: listener "main" address: listen udp 127\.0\.0\.1:\d+: bind: address already in use\.$`},
		{"listener address not local", conf("127.0.0.1:0", "", "192.0.2.1:0"), nil,
			`^6:13: Cannot bind listener address: listener "main" address: listen udp 192\.0\.2\.1:0: bind: cannot assign requested address\.$`},
		{"control address in use", conf(tcp.Addr().String(), "", "127.0.0.1:0"), nil,
			`^2:13: Cannot bind control address: control address: listen tcp 127\.0\.0\.1:\d+: bind: address already in use\.$`},
		{"certificate not PEM", conf("127.0.0.1:0", "", "127.0.0.1:0"), func(_, certFile, _ string) { os.WriteFile(certFile, []byte("garbage"), 0o600) },
			`^8:17: [^:]+: listener "main" tls cert_file: .*cert\.pem.*\.$`},
		{"key of another certificate", conf("127.0.0.1:0", "", "127.0.0.1:0"), func(_, _, keyFile string) { os.WriteFile(keyFile, other.KeyPEM, 0o600) },
			`^9:17: [^:]+: listener "main" tls key_file: .*key\.pem.*(match|public key).*\.$`},
		{"certificate as key", conf("127.0.0.1:0", "", "127.0.0.1:0"), func(_, certFile, keyFile string) { b, _ := os.ReadFile(certFile); os.WriteFile(keyFile, b, 0o600) },
			`^9:17: [^:]+: listener "main" tls key_file: .*key\.pem.*\.$`},
		{"token file gone before start", conf("127.0.0.1:0", fmt.Sprintf("token_file = %q", tokenFile), "127.0.0.1:0"), nil,
			`^3:16: Cannot read token file: control token_file: open .*token: no such file or directory\.$`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The token file exists for New (validation), not for Run.
			os.WriteFile(tokenFile, []byte("s3cret"), 0o600)
			err, logs := startErr(t, tc.config, tc.edit, func() { os.Remove(tokenFile) })
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v, want *ConfigError", err, err)
			}
			line := err.Error()
			_, rest, ok := strings.Cut(line, "gateway.hcl:")
			if !ok || !regexp.MustCompile(tc.want).MatchString(rest) {
				t.Fatalf("error\n  %s\nwant gateway.hcl:%s", line, tc.want)
			}
			if strings.Contains(line, "tls: tls:") {
				t.Errorf("doubled prefix in %s", line)
			}
			if !strings.Contains(logs, line+"\n") {
				t.Errorf("the log output lacks the diagnostic line:\n%s", logs)
			}
		})
	}
}

// TestReloadErrorsAreDiagnostics: POST /v1/reload answers 400 with a
// non-empty diagnostics list in validate's format for every kind of
// failure, including TLS material that only fails to load.
func TestReloadErrorsAreDiagnostics(t *testing.T) {
	r := start(t, baseConfig+catchAll(backend(t, "a").URL))
	certFile := filepath.Join(r.dir, "cert.pem")
	good, _ := os.ReadFile(certFile)
	os.WriteFile(certFile, []byte("garbage"), 0o600)
	code, body := r.control("POST", "/v1/reload", "")
	var resp struct {
		Error       string    `json:"error"`
		Diagnostics *[]string `json:"diagnostics"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil || code != http.StatusBadRequest || resp.Diagnostics == nil || len(*resp.Diagnostics) != 1 {
		t.Fatalf("reload with a broken certificate: %d %s", code, body)
	}
	if d := (*resp.Diagnostics)[0]; !regexp.MustCompile(`gateway\.hcl:8:17: [^:]+: listener "main" tls cert_file: `).MatchString(d) {
		t.Errorf("diagnostic %q does not point at cert_file", d)
	}
	os.WriteFile(certFile, good, 0o600)
	if code, body := r.control("POST", "/v1/reload", ""); code != http.StatusOK {
		t.Fatalf("reload after the fix: %d %s", code, body)
	}
	if !strings.Contains(r.logs.String(), `reload rejected; keeping the running configuration: diagnostic="`) {
		t.Errorf("the rejected reload was not logged with its diagnostic:\n%s", r.logs)
	}
}

// TestReloadWhileDraining: once SIGTERM's drain began, POST /v1/reload
// answers 409 saying the gateway is draining, and Reload does nothing.
func TestReloadWhileDraining(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("part1;"))
		w.(http.Flusher).Flush()
		close(started)
		<-release
	}))
	defer slow.Close()
	r := start(t, baseConfig+catchAll(slow.URL))
	go func() {
		if resp, err := r.client.Get(r.url("main", "/")); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	deadline := time.Now().Add(5 * time.Second)
	for !r.a.draining.Load() {
		if time.Now().After(deadline) {
			t.Fatal("no drain")
		}
		time.Sleep(5 * time.Millisecond)
	}
	code, body := r.control("POST", "/v1/reload", "")
	var resp map[string]any
	if err := json.Unmarshal([]byte(body), &resp); err != nil || code != http.StatusConflict || !strings.Contains(fmt.Sprint(resp["error"]), "draining") || resp["draining"] != true {
		t.Errorf("reload while draining: %d %s, want 409 with a JSON error naming the drain", code, body)
	}
	if gen, _, err := r.a.Reload(); !errors.Is(err, ErrDraining) || gen != 1 {
		t.Errorf("Reload while draining: %d %v, want generation 1 and ErrDraining", gen, err)
	}
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.logs.String(), "reload refused: the gateway is draining") {
		t.Errorf("the refused reload was not logged:\n%s", r.logs)
	}
}

// TestControlAuthorization: the Bearer scheme matches in any case (RFC 9110
// §11.1); /v1/health and /v1/ready need no token, /v1/ready without it
// tells its status but no reasons; everything else needs the token.
func TestControlAuthorization(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600)
	cfg := strings.Replace(baseConfig, `address = "127.0.0.1:0"
}`, fmt.Sprintf("address = \"127.0.0.1:0\"\n  token_file = %q\n}", tokenFile), 1) + catchAll(backend(t, "a").URL)
	r := start(t, cfg)
	do := func(path, auth string) (int, string) {
		req, _ := http.NewRequest("GET", "http://"+r.a.ControlAddr().String()+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, auth := range []string{"Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR  s3cret"} {
		if code, body := do("/v1/backends", auth); code != 200 {
			t.Errorf("Authorization %q: %d %s, want 200", auth, code, body)
		}
	}
	for _, auth := range []string{"", "Bearer wrong", "Basic s3cret", "Bearers3cret", "s3cret"} {
		if code, _ := do("/v1/backends", auth); code != 401 {
			t.Errorf("Authorization %q: %d, want 401", auth, code)
		}
	}
	code, body := do("/v1/ready", "")
	if code != 200 || strings.TrimSpace(strings.Join(strings.Fields(body), " ")) != `{ "ready": true, "status": "ok" }` {
		t.Errorf("/v1/ready without a token: %d %s, want 200 with the status only", code, body)
	}
	if code, _ := do("/v1/health", ""); code != 200 {
		t.Errorf("/v1/health without a token: %d", code)
	}
}

// TestUnauthenticatedControlRefused: a control API on a non-loopback
// address without token_file is refused at startup and by a reload, at
// control.address; allow_unauthenticated = true permits it.
func TestUnauthenticatedControlRefused(t *testing.T) {
	open := strings.Replace(baseConfig, `address = "127.0.0.1:0"`, `address = "0.0.0.0:0"`, 1)
	err, logs := startErr(t, open, nil, func() {})
	if err == nil || !regexp.MustCompile(`gateway\.hcl:3:13: Unauthenticated control API: control address: "0\.0\.0\.0:0"`).MatchString(err.Error()) {
		t.Fatalf("start: %v\n%s", err, logs)
	}
	r := start(t, baseConfig+catchAll(backend(t, "a").URL))
	cfg, _ := os.ReadFile(r.cfg)
	os.WriteFile(r.cfg, []byte(strings.Replace(string(cfg), `address = "127.0.0.1:0"`, `address = "0.0.0.0:0"`, 1)), 0o600)
	code, body := r.control("POST", "/v1/reload", "")
	if code != http.StatusBadRequest || !strings.Contains(body, "Unauthenticated control API") {
		t.Fatalf("reload to 0.0.0.0 without a token: %d %s", code, body)
	}
	os.WriteFile(r.cfg, []byte(strings.Replace(string(cfg), `address = "127.0.0.1:0"`, "address = \"127.0.0.1:0\"\n  allow_unauthenticated = true", 1)), 0o600)
	if code, body := r.control("POST", "/v1/reload", ""); code != http.StatusOK {
		t.Fatalf("reload with allow_unauthenticated: %d %s", code, body)
	}
}

// tlsListener is a listener block on a free loopback port with
// writeConfig's certificate, for configurations that need one of any kind.
const tlsListener = `
listener "public" {
  address = "127.0.0.1:0"
  tls {
    cert_file = "%[1]s"
    key_file  = "%[2]s"
  }
}
`

// convertedConfig writes config as writeConfig does, loads it and returns
// the gateway configuration the agent makes of it.
func convertedConfig(t *testing.T, config string) gateway.Config {
	t.Helper()
	cfgFile, _, _ := writeConfig(t, config)
	cfg, diags := hcl.Load([]string{cfgFile})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	gc, err := gatewayConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return gc
}

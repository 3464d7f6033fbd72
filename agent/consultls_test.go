package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testpki"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// consulTLSConfig is a gateway whose upstream "web" is the Consul service
// tls-web, with consulBlock as its consul block (a %% in it must be
// doubled: start formats the configuration).
func consulTLSConfig(consulBlock string) string {
	return baseConfig + consulBlock + `
upstream "web" {
  route {}
  consul {
    service = "tls-web"
    scheme  = "http"
  }
}
`
}

// readyReasons returns /v1/ready's status code and reasons.
func readyReasons(t *testing.T, r *running) (int, []string) {
	t.Helper()
	code, body := r.control("GET", "/v1/ready", "")
	var doc struct{ Reasons []string }
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatalf("/v1/ready: %v in %q", err, body)
	}
	return code, doc.Reasons
}

// unsetConsulEnv empties the Consul CLI's variables for the test.
func unsetConsulEnv(t *testing.T) {
	for _, k := range []string{"CONSUL_HTTP_ADDR", "CONSUL_HTTP_SSL", "CONSUL_HTTP_SSL_VERIFY", "CONSUL_CACERT",
		"CONSUL_CAPATH", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME", "CONSUL_HTTP_TOKEN",
		"CONSUL_HTTP_TOKEN_FILE"} {
		t.Setenv(k, "")
	}
}

// TestConsulTLSLive: the gateway reaches a Consul agent that serves HTTPS
// only and requires client certificates (consultest.WithTLS, made with
// `consul tls ca create` / `cert create`), configured by the consul
// block's address, tls ca_file, cert_file, key_file and server_name, or by
// the Consul CLI's variables alone (CONSUL_HTTP_ADDR=https://...,
// CONSUL_CACERT, CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY): it becomes ready
// and routes to the service's instance. A ca_file of another CA, or no
// client certificate, keeps the gateway unready, with the TLS error and
// what to set in /v1/ready's reasons and in the log from the start on.
func TestConsulTLSLive(t *testing.T) {
	consul := consultest.Start(t, consultest.WithTLS())
	f := consul.TLS()
	be := backend(t, "tls-web-1")
	consul.RegisterTTL(t, "tls-web-1", "tls-web", "127.0.0.1", portOf(t, be), nil, nil)
	other := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(other, testpki.NewCA(t, "not consul's CA").CAPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	block := func(address, tls string) string {
		return fmt.Sprintf("consul {\n  address = %q\n  wait = \"5s\"\n  tls {\n%s  }\n}\n", address, tls)
	}
	files := fmt.Sprintf("    ca_file = %q\n    cert_file = %q\n    key_file = %q\n", f.CAFile, f.ClientCert, f.ClientKey)

	for _, tc := range []struct {
		name   string
		consul string
		env    map[string]string
	}{
		{name: "ca_file and client certificate", consul: block(consul.URL(), files)},
		{name: "server_name", consul: block(consul.URL(), files+"    server_name = \"server.dc1.consul\"\n")},
		{name: "scheme https", consul: fmt.Sprintf("consul {\n  address = %q\n  scheme = \"https\"\n  tls {\n%s  }\n}\n", consul.Addr(), files)},
		{name: "environment", consul: "consul {\n  wait = \"5s\"\n}\n", env: map[string]string{
			"CONSUL_HTTP_ADDR": consul.URL(), "CONSUL_CACERT": f.CAFile,
			"CONSUL_CLIENT_CERT": f.ClientCert, "CONSUL_CLIENT_KEY": f.ClientKey}},
		{name: "environment without a consul block", env: map[string]string{
			"CONSUL_HTTP_ADDR": consul.URL(), "CONSUL_CACERT": f.CAFile,
			"CONSUL_CLIENT_CERT": f.ClientCert, "CONSUL_CLIENT_KEY": f.ClientKey}},
		{name: "CONSUL_HTTP_SSL", consul: "consul {\n  wait = \"5s\"\n}\n", env: map[string]string{
			"CONSUL_HTTP_ADDR": consul.Addr(), "CONSUL_HTTP_SSL": "true", "CONSUL_CACERT": f.CAFile,
			"CONSUL_CLIENT_CERT": f.ClientCert, "CONSUL_CLIENT_KEY": f.ClientKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unsetConsulEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			r := start(t, consulTLSConfig(tc.consul))
			waitFor(t, 10*time.Second, "/v1/ready 200", func() bool { code, _ := readyReasons(t, r); return code == 200 })
			if code, body := r.get(t, r.url("main", "/")); code != 200 || body != "tls-web-1" {
				t.Fatalf("GET /: %d %q, want the Consul instance's answer", code, body)
			}
		})
	}

	for _, tc := range []struct {
		name, consul string
		want         []string
		log          string // also in the log at startup
	}{
		{name: "another CA", consul: block(consul.URL(), fmt.Sprintf("    ca_file = %q\n    cert_file = %q\n    key_file = %q\n", other, f.ClientCert, f.ClientKey)),
			want: []string{"x509: certificate signed by unknown authority", "consul.tls ca_file, or CONSUL_CACERT, must hold the CA that signed it"}},
		{name: "no client certificate", consul: block(consul.URL(), fmt.Sprintf("    ca_file = %q\n", f.CAFile)),
			want: []string{"Consul asked for a client certificate, as it does with verify_incoming on, and none is configured", "set consul.tls cert_file and key_file, or CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY"}},
		{name: "http to the https port", consul: block(consul.Addr(), files),
			want: []string{"status 400", "Client sent an HTTP request to an HTTPS server", "use an https:// address"},
			log:  `TLS not used: consul scheme: \"http\", so the consul tls settings are not used`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unsetConsulEnv(t)
			r := start(t, consulTLSConfig(tc.consul))
			var reasons []string
			waitFor(t, 10*time.Second, "a TLS error in /v1/ready", func() bool {
				code, rs := readyReasons(t, r)
				if code != 503 {
					t.Fatalf("/v1/ready %d %q, want 503", code, rs)
				}
				reasons = rs
				return slices.ContainsFunc(rs, func(s string) bool { return strings.Contains(s, "last error") })
			})
			i := slices.IndexFunc(reasons, func(s string) bool { return strings.HasPrefix(s, "consul service tls-web: ") })
			if i < 0 {
				t.Fatalf("/v1/ready reasons %q: none for the consul service", reasons)
			}
			// The error is the service's own read's, or the change feed's
			// when the feed failed first (the watch then waits for it).
			for _, w := range append(tc.want, "consul service tls-web: not synced yet (last error: ", "discovery: GET /v1/") {
				if !strings.Contains(reasons[i], w) {
					t.Errorf("/v1/ready reason %q does not say %q", reasons[i], w)
				}
				if logs := r.logs.String(); !strings.Contains(logs, w) && !strings.HasPrefix(w, "consul service") && !strings.HasPrefix(w, "status ") && !strings.HasPrefix(w, "discovery: ") {
					t.Errorf("the log does not say %q:\n%s", w, logs)
				}
			}
			if logs := r.logs.String(); tc.log != "" && !strings.Contains(logs, tc.log) {
				t.Errorf("the log does not say %q:\n%s", tc.log, logs)
			}
		})
	}
}

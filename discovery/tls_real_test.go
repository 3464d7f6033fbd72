package discovery

// TLS to a real Consul agent serving its API over HTTPS only with
// verify_incoming (consultest.WithTLS): certificates made by `consul tls ca
// create` and `consul tls cert create`.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testpki"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// firstAnswer watches service with c until it emits its first snapshot
// (synced) or its status reports a failed query (lastError), at most 15 s.
func firstAnswer(t *testing.T, c *Client, service string) (synced bool, s Snapshot, lastError string) {
	t.Helper()
	w := startWatch(t, c, Query{Service: service})
	defer w.stop(t)
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if s, ok := w.rec.last(); ok {
			return true, s, ""
		}
		for _, st := range c.Status() {
			if st.LastError != "" {
				return false, Snapshot{}, st.LastError
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false, Snapshot{}, "no answer and no error within 15s"
}

// otherCA writes the certificate of a CA that did not sign Consul's
// certificate to a ca_file.
func otherCA(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(f, testpki.NewCA(t, "not consul's CA").CAPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// clearConsulEnv empties the CONSUL_* variables consul/api reads, so the
// test sees only what it sets.
func clearConsulEnv(t *testing.T) {
	for _, k := range []string{"CONSUL_HTTP_ADDR", "CONSUL_HTTP_SSL", "CONSUL_HTTP_SSL_VERIFY", "CONSUL_CACERT",
		"CONSUL_CAPATH", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME", "CONSUL_HTTP_TOKEN",
		"CONSUL_HTTP_TOKEN_FILE"} {
		t.Setenv(k, "")
	}
}

// TestConsulTLSLiveAgent: against a Consul agent with TLS on, the watch
// verifies the agent's certificate against ca_file and presents the client
// certificate; an https:// address or a tls block alone selects HTTPS;
// server_name is the name verified. Without a client certificate, with
// another CA, with the system roots or with a wrong server_name the query
// fails with the TLS error in the watch status, and a hint naming what to
// set (for a missing client certificate, which Consul's TLS 1.3 refusal
// leaves as a broken pipe or an EOF, the only clue); and no snapshot is
// emitted. So does a scheme that does not match the port.
// The CONSUL_HTTP_ADDR, CONSUL_HTTP_SSL, CONSUL_CACERT, CONSUL_CLIENT_CERT,
// CONSUL_CLIENT_KEY and CONSUL_TLS_SERVER_NAME variables work as the Consul
// CLI reads them, and explicit settings win over them.
func TestConsulTLSLiveAgent(t *testing.T) {
	a := consultest.Start(t, consultest.WithTLS())
	f := a.TLS()
	a.RegisterTTL(t, "tls-web-1", "tls-web", "10.0.0.1", 8443, nil, nil)
	good := TLSConfig{CAFile: f.CAFile, CertFile: f.ClientCert, KeyFile: f.ClientKey}

	ok := []struct {
		name string
		env  map[string]string
		cfg  Config
	}{
		{name: "https address, ca_file, client certificate", cfg: Config{Address: a.URL(), TLS: good}},
		{name: "tls block selects https", cfg: Config{Address: a.Addr(), TLS: good}},
		{name: "scheme https", cfg: Config{Address: a.Addr(), Scheme: "https", TLS: good}},
		{name: "server_name", cfg: Config{Address: a.URL(), TLS: TLSConfig{CAFile: f.CAFile, CertFile: f.ClientCert,
			KeyFile: f.ClientKey, ServerName: "server.dc1.consul"}}},
		{name: "environment only", env: map[string]string{"CONSUL_HTTP_ADDR": a.URL(), "CONSUL_CACERT": f.CAFile,
			"CONSUL_CLIENT_CERT": f.ClientCert, "CONSUL_CLIENT_KEY": f.ClientKey}},
		{name: "CONSUL_HTTP_SSL with host:port", env: map[string]string{"CONSUL_HTTP_ADDR": a.Addr(), "CONSUL_HTTP_SSL": "true",
			"CONSUL_CACERT": f.CAFile, "CONSUL_CLIENT_CERT": f.ClientCert, "CONSUL_CLIENT_KEY": f.ClientKey,
			"CONSUL_TLS_SERVER_NAME": "server.dc1.consul"}},
		{name: "config wins over a wrong CONSUL_CACERT", env: map[string]string{"CONSUL_CACERT": otherCA(t)},
			cfg: Config{Address: a.URL(), TLS: good}},
		{name: "CONSUL_HTTP_SSL_VERIFY=false", env: map[string]string{"CONSUL_HTTP_SSL_VERIFY": "false"},
			cfg: Config{Address: a.URL(), TLS: TLSConfig{CertFile: f.ClientCert, KeyFile: f.ClientKey}}},
		{name: "environment client certificate with config ca_file",
			env: map[string]string{"CONSUL_CLIENT_CERT": f.ClientCert, "CONSUL_CLIENT_KEY": f.ClientKey},
			cfg: Config{Address: a.URL(), TLS: TLSConfig{CAFile: f.CAFile}}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			clearConsulEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg := tc.cfg
			c := newTestClient(t, cfg.Address, func(c *Config) { c.Scheme, c.TLS = cfg.Scheme, cfg.TLS })
			synced, s, lastErr := firstAnswer(t, c, "tls-web")
			if !synced {
				t.Fatalf("not synced: %s", lastErr)
			}
			if ids := instanceIDs(s); len(ids) != 1 || ids[0] != "tls-web-1" {
				t.Fatalf("instances %v, want tls-web-1", ids)
			}
		})
	}

	fail := []struct {
		name   string
		env    map[string]string
		addr   string // default a.URL()
		scheme string
		tls    TLSConfig
		want   []string // every one
	}{
		{name: "no client certificate", tls: TLSConfig{CAFile: f.CAFile},
			want: []string{"transport: ", hintClientCert}},
		{name: "another CA", tls: TLSConfig{CAFile: otherCA(t), CertFile: f.ClientCert, KeyFile: f.ClientKey},
			want: []string{"certificate signed by unknown authority", hintUnknownCA}},
		{name: "system roots", tls: TLSConfig{CertFile: f.ClientCert, KeyFile: f.ClientKey},
			want: []string{"certificate signed by unknown authority", hintUnknownCA}},
		{name: "another CA in CONSUL_CACERT", env: map[string]string{"CONSUL_CACERT": otherCA(t)},
			tls:  TLSConfig{CertFile: f.ClientCert, KeyFile: f.ClientKey},
			want: []string{"certificate signed by unknown authority", hintUnknownCA}},
		{name: "wrong server_name", tls: TLSConfig{CAFile: f.CAFile, CertFile: f.ClientCert, KeyFile: f.ClientKey,
			ServerName: "consul.example.com"}, want: []string{"not consul.example.com", hintHostname}},
		{name: "http to the https port", addr: a.Addr(), scheme: "http", tls: good,
			want: []string{"status 400", "Client sent an HTTP request to an HTTPS server", hintHTTPToHTTPS}},
		{name: "https to an http port", addr: "https://" + consultest.Start(t).Addr(), tls: good,
			want: []string{"server gave HTTP response to HTTPS client", hintHTTPSToHTTP}},
	}
	for _, tc := range fail {
		t.Run(tc.name, func(t *testing.T) {
			clearConsulEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			addr := tc.addr
			if addr == "" {
				addr = a.URL()
			}
			c := newTestClient(t, addr, func(c *Config) { c.Scheme, c.TLS = tc.scheme, tc.tls })
			synced, _, lastErr := firstAnswer(t, c, "tls-web")
			if synced {
				t.Fatal("synced, want a TLS failure")
			}
			for _, w := range append(tc.want, "discovery: GET /v1/health/service/tls-web: ") {
				if !strings.Contains(lastErr, w) {
					t.Errorf("last error %q does not say %q", lastErr, w)
				}
			}
		})
	}
}

// TestClientCertHintOnlyForAClosedConnection: once Consul has asked for a
// client certificate the configuration lacks, the hint names it for the
// failures a refusal produces (alert, broken pipe, reset, EOF), never for
// a connection refused or a timeout (an agent restarting).
func TestClientCertHintOnlyForAClosedConnection(t *testing.T) {
	c := &Client{}
	c.certAsked.Store(true)
	for _, tc := range []struct {
		err  error
		hint bool
	}{
		{&net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{fmt.Errorf("Get %q: %w", "https://c/v1/x", io.EOF), true},
		{errors.New("remote error: tls: certificate required"), true},
		{errors.New("http2: client conn could not be established"), true},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{errors.New("dial tcp: lookup consul.invalid: no such host"), false},
	} {
		got := c.hint(&queryError{reason: reasonTransport, err: tc.err})
		if (got == hintClientCert) != tc.hint {
			t.Errorf("%v: hint %q, want the client-certificate hint: %v", tc.err, got, tc.hint)
		}
	}
	if got := (&Client{}).hint(&queryError{reason: reasonTransport, err: io.EOF}); got != "" {
		t.Errorf("without a certificate request: hint %q", got)
	}
}

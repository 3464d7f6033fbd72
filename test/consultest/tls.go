package consultest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
)

// TLSFiles are the PEM files of an agent started [WithTLS], made by the
// agent's own `consul tls ca create` and `consul tls cert create` in its
// temporary directory (datacenter dc1).
type TLSFiles struct {
	// CAFile is the CA certificate that signed both leaves (for a client's
	// ca_file or CONSUL_CACERT).
	CAFile string
	// ServerCert and ServerKey are what the agent serves on its HTTPS port.
	// The certificate names server.dc1.consul, localhost and 127.0.0.1.
	ServerCert, ServerKey string
	// ClientCert and ClientKey are a client certificate the agent accepts
	// (verify_incoming is on: without one the handshake fails).
	ClientCert, ClientKey string
}

// WithTLS serves the HTTP API over HTTPS only, with verify_incoming: the
// plain HTTP port is off, a client must verify the agent against
// [TLSFiles].CAFile and present a certificate the CA signed (such as
// [TLSFiles].ClientCert). [Agent.Addr] is then the HTTPS port, [Agent.URL]
// starts with https://, and [Agent.Client] and the helpers present the
// client certificate. The configuration, in Consul 1.14's syntax:
//
//	ports { https = <port> }
//	tls {
//	  defaults { ca_file = ... cert_file = ... key_file = ... verify_incoming = true }
//	  internal_rpc { verify_incoming = false }
//	}
//
// (The dev agent's own RPC to itself does not present a certificate.)
func WithTLS() Option { return func(o *options) { o.tls = true } }

// TLS returns the agent's PKI files, nil for an agent started without
// [WithTLS].
func (a *Agent) TLS() *TLSFiles { return a.tls }

// URL returns the HTTP API's base URL: http://127.0.0.1:PORT, or https://
// for an agent started [WithTLS].
func (a *Agent) URL() string {
	if a.tls != nil {
		return "https://" + a.Addr()
	}
	return "http://" + a.Addr()
}

// makePKI runs `consul tls ca create` and `consul tls cert create -server`
// and `-client` in dir.
func makePKI(bin, dir string) (*TLSFiles, error) {
	for _, args := range [][]string{
		{"tls", "ca", "create"},
		{"tls", "cert", "create", "-server", "-dc", "dc1"},
		{"tls", "cert", "create", "-client", "-dc", "dc1"},
	} {
		var out bytes.Buffer
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &out
		cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("consultest: consul %v: %w\n%s", args, err, out.String())
		}
	}
	f := &TLSFiles{
		CAFile:     filepath.Join(dir, "consul-agent-ca.pem"),
		ServerCert: filepath.Join(dir, "dc1-server-consul-0.pem"),
		ServerKey:  filepath.Join(dir, "dc1-server-consul-0-key.pem"),
		ClientCert: filepath.Join(dir, "dc1-client-consul-0.pem"),
		ClientKey:  filepath.Join(dir, "dc1-client-consul-0-key.pem"),
	}
	for _, p := range []string{f.CAFile, f.ServerCert, f.ServerKey, f.ClientCert, f.ClientKey} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("consultest: consul tls did not write %s: %w", p, err)
		}
	}
	return f, nil
}

// tlsConfigHCL is the agent configuration of a TLS agent whose HTTPS port
// is port.
func tlsConfigHCL(f *TLSFiles, port int) string {
	return `ports { https = ` + strconv.Itoa(port) + ` }
tls {
  defaults {
    ca_file         = ` + strconv.Quote(f.CAFile) + `
    cert_file       = ` + strconv.Quote(f.ServerCert) + `
    key_file        = ` + strconv.Quote(f.ServerKey) + `
    verify_incoming = true
  }
  internal_rpc { verify_incoming = false }
}
`
}

// apiConfig is the consul/api configuration of the harness's clients: the
// agent's address, token, and for a TLS agent its CA and the client
// certificate. No keep-alive: no idle goroutines left behind.
func (a *Agent) apiConfig(token string) *api.Config {
	c := &api.Config{Address: a.Addr(), Token: token, Transport: cleanhttp.DefaultTransport()}
	if a.tls != nil {
		c.Scheme = "https"
		c.TLSConfig = api.TLSConfig{CAFile: a.tls.CAFile, CertFile: a.tls.ClientCert, KeyFile: a.tls.ClientKey}
	}
	return c
}

// httpClient is a plain HTTP client for the agent's API (the leader poll),
// trusting its CA and presenting the client certificate for a TLS agent.
func (a *Agent) httpClient() (*http.Client, error) {
	tr := cleanhttp.DefaultTransport()
	if a.tls != nil {
		pem, err := os.ReadFile(a.tls.CAFile)
		if err != nil {
			return nil, fmt.Errorf("consultest: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("consultest: %s: no certificate", a.tls.CAFile)
		}
		cert, err := tls.LoadX509KeyPair(a.tls.ClientCert, a.tls.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("consultest: %w", err)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Timeout: httpTimeout, Transport: tr}, nil
}

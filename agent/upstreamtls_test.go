package agent

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/impulse-agent/impulse-agent/internal/testpki"
)

// writePEM writes c's certificate and key under dir as name.pem and
// name-key.pem.
func writePEM(t *testing.T, dir, name string, certPEM, keyPEM []byte) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestUpstreamClientCertificateAndServerName: an HTTPS backend that
// requires a client certificate from its CA and accepts only the SNI
// backend.internal (its certificate names nothing else, no IP address) is
// reached with the upstream's tls { ca_file, cert_file, key_file,
// server_name }: 200, the backend saw the gateway's certificate and that
// SNI on every handshake. Without the certificate, with one of another CA,
// with another server_name or with none, the answer is 502
// backend_tls_failed (README "What the gateway answers itself": a TLS
// handshake or certificate failure).
func TestUpstreamClientCertificateAndServerName(t *testing.T) {
	dir := t.TempDir()
	ca, stranger := testpki.NewCA(t, "mesh CA"), testpki.NewCA(t, "another CA")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.CAPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := ca.Issue(t, testpki.Leaf{CN: "backend.internal", DNS: []string{"backend.internal"}})
	certPEM, keyPEM := testpki.PEM(t, ca.Issue(t, testpki.Leaf{CN: "impulse-gateway", Client: true}))
	cert, key := writePEM(t, dir, "gateway", certPEM, keyPEM)
	certPEM, keyPEM = testpki.PEM(t, stranger.Issue(t, testpki.Leaf{CN: "intruder", Client: true}))
	foreignCert, foreignKey := writePEM(t, dir, "foreign", certPEM, keyPEM)
	be := testbackend.NewMTLS(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "mtls-ok")
	}), srv, ca.Pool, "backend.internal")

	for _, tc := range []struct {
		name, tls string
		code      int
		reason    string
		sni       string // every handshake's, when set
	}{
		{name: "certificate and server_name", code: 200, sni: "backend.internal",
			tls: fmt.Sprintf("ca_file = %q\n    cert_file = %q\n    key_file = %q\n    server_name = \"backend.internal\"", caFile, cert, key)},
		{name: "no client certificate", code: 502, reason: "backend_tls_failed", sni: "backend.internal",
			tls: fmt.Sprintf("ca_file = %q\n    server_name = \"backend.internal\"", caFile)},
		{name: "certificate of another CA", code: 502, reason: "backend_tls_failed", sni: "backend.internal",
			tls: fmt.Sprintf("ca_file = %q\n    cert_file = %q\n    key_file = %q\n    server_name = \"backend.internal\"", caFile, foreignCert, foreignKey)},
		{name: "another server_name", code: 502, reason: "backend_tls_failed", sni: "other.internal",
			tls: fmt.Sprintf("ca_file = %q\n    cert_file = %q\n    key_file = %q\n    server_name = \"other.internal\"", caFile, cert, key)},
		{name: "no server_name", code: 502, reason: "backend_tls_failed", sni: "",
			tls: fmt.Sprintf("ca_file = %q\n    cert_file = %q\n    key_file = %q", caFile, cert, key)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(be.SNIs())
			r := start(t, baseConfig+fmt.Sprintf(`
upstream "mesh" {
  route {}
  backend "m" {
    address = %q
  }
  tls {
    %s
  }
}
`, be.URL, tc.tls))
			t0 := time.Now()
			resp, err := r.client.Get(r.url("main", "/"))
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(t0); d > 500*time.Millisecond {
				t.Errorf("answered after %v: a refused handshake must fail at once", d)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.code || resp.Header.Get("X-Impulse-Error") != tc.reason {
				t.Fatalf("GET: %d %q (x-impulse-error %q), want %d %q", resp.StatusCode, body, resp.Header.Get("X-Impulse-Error"), tc.code, tc.reason)
			}
			if tc.code == 200 && (string(body) != "mtls-ok" || resp.Header.Get("X-Client-CN") != "impulse-gateway") {
				t.Errorf("body %q, X-Client-CN %q: want the backend's answer to the gateway's certificate", body, resp.Header.Get("X-Client-CN"))
			}
			snis := be.SNIs()[before:]
			if len(snis) == 0 {
				t.Fatal("the backend saw no handshake")
			}
			for _, s := range snis {
				if s != tc.sni {
					t.Errorf("SNIs %q, want %q on each", snis, tc.sni)
					break
				}
			}
		})
	}
}

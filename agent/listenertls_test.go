package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/internal/testpki"
)

// writePair writes c's certificate and key as name.pem and name-key.pem
// in dir and returns both paths.
func writePair(t *testing.T, dir, name string, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	certPEM, keyPEM := testpki.PEM(t, c)
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// h3Get sends GET url over tr and returns the served leaf and the body.
func h3Get(tr *http3.Transport, url string) (*tls.ConnectionState, string, error) {
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.TLS, string(b), err
}

// expirySeries finds impulse_tls_certificate_expiry_seconds of name on
// listener "main" in a /metrics body.
func expirySeries(t *testing.T, body, name string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^impulse_tls_certificate_expiry_seconds\{listener="main",name="` + regexp.QuoteMeta(name) + `"\} (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no expiry series for %q in:\n%s", name, body)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestI02CertificateFilesReloaded: certificate blocks from the
// configuration are served by SNI; POST /v1/reload (as SIGHUP) re-reads
// rotated files: a connection opened before keeps working, a new one gets
// the new certificate, and impulse_tls_certificate_expiry_seconds follows.
func TestI02CertificateFilesReloaded(t *testing.T) {
	ca := testpki.NewCA(t, "server CA")
	dir := t.TempDir()
	aCert, aKey := writePair(t, dir, "a", ca.Issue(t, testpki.Leaf{CN: "a-1", DNS: []string{"a.test"}, NotAfter: time.Now().Add(10 * 24 * time.Hour)}))
	r := start(t, fmt.Sprintf(`
control {
  address = "127.0.0.1:0"
}
listener "main" {
  address = "127.0.0.1:0"
  tls {
    cert_file = %%[1]q
    key_file  = %%[2]q
    certificate {
      cert_file = %q
      key_file  = %q
    }
  }
}
`, aCert, aKey)+catchAll(backend(t, "ok").URL))

	var dials atomic.Int32
	old := &http3.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "a.test"},
		Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			dials.Add(1)
			return quic.DialAddrEarly(ctx, addr, tc, qc)
		},
	}
	defer old.Close()
	url := r.url("main", "/")
	cs, body, err := h3Get(old, url)
	if err != nil || body != "ok" || cs.PeerCertificates[0].Subject.CommonName != "a-1" {
		t.Fatalf("before the reload: %v %q", err, body)
	}
	_, metricsBody := r.control("GET", "/metrics", "")
	if got, want := expirySeries(t, metricsBody, "a.test"), time.Until(cs.PeerCertificates[0].NotAfter).Seconds(); got > want+5 || got < want-5 {
		t.Errorf("a.test expires in %v s, want about %v", got, want)
	}
	expirySeries(t, metricsBody, "default")

	rotated := ca.Issue(t, testpki.Leaf{CN: "a-2", DNS: []string{"a.test"}, NotAfter: time.Now().Add(20 * 24 * time.Hour)})
	writePair(t, dir, "a", rotated)
	if code, body := r.control("POST", "/v1/reload", ""); code != http.StatusOK {
		t.Fatalf("reload: %d %s", code, body)
	}
	cs, body, err = h3Get(old, url)
	if err != nil || body != "ok" || dials.Load() != 1 || cs.PeerCertificates[0].Subject.CommonName != "a-1" {
		t.Fatalf("the connection opened before the reload: %v %q after %d dials", err, body, dials.Load())
	}
	fresh := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "a.test"}}
	defer fresh.Close()
	cs, _, err = h3Get(fresh, url)
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.PeerCertificates[0].Subject.CommonName; got != "a-2" {
		t.Fatalf("a new connection after the reload got %q, want the rotated a-2", got)
	}
	want := time.Until(rotated.Leaf.NotAfter).Seconds()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, metricsBody = r.control("GET", "/metrics", "")
		got := expirySeries(t, metricsBody, "a.test")
		if got <= want+5 && got >= want-5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a.test expires in %v s after the reload, want about %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestI01ClientCertificatesFromConfig: client_auth, client_ca_file and
// forward_client_cert reach the listener: a client without a certificate
// is refused (CRYPTO_ERROR, alert certificate_required), one with a
// certificate from the client CA is served and the backend gets its
// X-Forwarded-Client-Cert, not the one the client sent.
func TestI01ClientCertificatesFromConfig(t *testing.T) {
	clientCA := testpki.NewCA(t, "client CA")
	dir := t.TempDir()
	caFile := filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(caFile, clientCA.CAPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	xfcc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Join(r.Header.Values("X-Forwarded-Client-Cert"), "|"))
	}))
	t.Cleanup(xfcc.Close)
	r := start(t, fmt.Sprintf(`
control {
  address = "127.0.0.1:0"
}
listener "main" {
  address = "127.0.0.1:0"
  tls {
    cert_file           = %%[1]q
    key_file            = %%[2]q
    client_auth         = "require"
    client_ca_file      = %q
    forward_client_cert = true
  }
}
`, caFile)+catchAll(xfcc.URL))
	url := r.url("main", "/")

	// r.client trusts the server certificate and has no client certificate.
	_, err := r.client.Get(url)
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.TransportErrorCode(0x100+116) {
		t.Fatalf("no client certificate: %v; want CRYPTO_ERROR with alert certificate_required (116)", err)
	}

	client := clientCA.Issue(t, testpki.Leaf{CN: "svc", Client: true, URIs: []string{"spiffe://test/svc"}})
	base := r.client.Transport.(*http3.Transport).TLSClientConfig.Clone()
	base.Certificates = []tls.Certificate{client}
	tr := &http3.Transport{TLSClientConfig: base}
	defer tr.Close()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-Forwarded-Client-Cert", "Hash=forged")
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.HasPrefix(got, []byte("Hash=")) || bytes.Contains(got, []byte("forged")) ||
		!bytes.Contains(got, []byte(`;Subject="CN=svc,O=impulse tests";URI=spiffe://test/svc`)) {
		t.Fatalf("%d, backend saw X-Forwarded-Client-Cert %q", resp.StatusCode, got)
	}
}

// TestListenerConfigErrors: TLS material that stops loading between
// validation and use is a *ConfigError at the file at fault.
func TestListenerConfigErrors(t *testing.T) {
	ca := testpki.NewCA(t, "ca")
	dir := t.TempDir()
	defCert, defKey := writePair(t, dir, "default", ca.Issue(t, testpki.Leaf{CN: "d", DNS: []string{"localhost"}}))
	aCert, aKey := writePair(t, dir, "a", ca.Issue(t, testpki.Leaf{CN: "a", DNS: []string{"a.test"}}))
	ipCert, ipKey := writePair(t, dir, "ip", ca.Issue(t, testpki.Leaf{CN: "ip", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}}))
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("junk"), 0o600)
	at := func(line int) hcl2.Range {
		return hcl2.Range{Filename: "gw.hcl", Start: hcl2.Pos{Line: line, Column: 5}}
	}
	base := func() hcl.Listener {
		return hcl.Listener{Name: "main", Address: "127.0.0.1:0", TLS: hcl.ListenerTLS{
			CertFile: defCert, KeyFile: defKey, CertFileRange: at(1), KeyFileRange: at(2), ClientCAFileRange: at(3),
			Certificates: []hcl.Certificate{{CertFile: aCert, KeyFile: aKey, CertFileRange: at(4), KeyFileRange: at(5)}},
		}}
	}
	for _, tc := range []struct {
		name string
		edit func(*hcl.Listener)
		want string
	}{
		{"default key", func(l *hcl.Listener) { l.TLS.KeyFile = aKey }, `gw.hcl:2:5: Invalid private key: listener "main" tls key_file: `},
		{"certificate file", func(l *hcl.Listener) { l.TLS.Certificates[0].CertFile = junk }, `gw.hcl:4:5: Invalid certificate: listener "main" tls certificate cert_file: `},
		{"certificate key gone", func(l *hcl.Listener) { l.TLS.Certificates[0].KeyFile = junk + "-gone" }, `gw.hcl:5:5: Cannot read private key: listener "main" tls certificate key_file: `},
		{"client CA", func(l *hcl.Listener) { l.TLS.ClientAuth, l.TLS.ClientCAFile = "require", junk }, `gw.hcl:3:5: Invalid CA file: listener "main" tls client_ca_file: `},
		{"no DNS SAN", func(l *hcl.Listener) {
			l.TLS.Certificates = append(l.TLS.Certificates, hcl.Certificate{CertFile: ipCert, KeyFile: ipKey, CertFileRange: at(6)})
		}, `gw.hcl:6:5: Unusable certificate: listener "main" tls certificate cert_file: .*no DNS name`},
	} {
		l := base()
		tc.edit(&l)
		_, err := listenerConfig(l)
		var ce *ConfigError
		if !errors.As(err, &ce) || !regexp.MustCompile(tc.want).MatchString(err.Error()) {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	lc, err := listenerConfig(base())
	if err != nil || lc.TLS == nil || lc.TLS.GetCertificate == nil || len(lc.CertificateExpiry) != 2 || lc.TLS.ClientAuth != tls.NoClientCert {
		t.Fatalf("listenerConfig = %+v, %v", lc, err)
	}
}

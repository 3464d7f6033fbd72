package hcl

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFile writes data to name in dir and returns the path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rsaPair returns an RSA certificate valid from..until and its PKCS #1 key,
// both PEM: another key format than the committed ECDSA/PKCS #8 ones.
func rsaPair(t *testing.T, from, until time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "rsa.test"}, NotBefore: from, NotAfter: until}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
}

func TestLoadKeyPair(t *testing.T) {
	dir := t.TempDir()
	rsaCert, rsaKey := rsaPair(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	good := writeFile(t, dir, "rsa.pem", rsaCert)
	goodKey := writeFile(t, dir, "rsa.key", rsaKey)
	cert, err := LoadKeyPair(good, goodKey)
	if err != nil || cert.Leaf == nil || cert.Leaf.Subject.CommonName != "rsa.test" {
		t.Fatalf("LoadKeyPair(rsa) = %v, %v", cert.Leaf, err)
	}
	// A chain: leaf then another certificate; both must parse.
	chain := append(append([]byte{}, rsaCert...), mustRead(t, "testdata/certs/ca.pem")...)
	if _, err := LoadKeyPair(writeFile(t, dir, "chain.pem", chain), goodKey); err != nil {
		t.Errorf("chain: %v", err)
	}

	corrupt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})
	tests := []struct {
		name, cert, key string
		field, reason   string
	}{
		{"missing cert", filepath.Join(dir, "nope.pem"), goodKey, "cert_file", "cannot read: no such file or directory"},
		{"missing key", good, filepath.Join(dir, "nope.key"), "key_file", "cannot read: no such file or directory"},
		{"corrupt cert", writeFile(t, dir, "corrupt.pem", corrupt), goodKey, "cert_file", "certificate 1 does not parse: "},
		{"corrupt second cert", writeFile(t, dir, "corrupt2.pem", append(append([]byte{}, rsaCert...), corrupt...)), goodKey, "cert_file", "certificate 2 does not parse: "},
		{"empty cert", writeFile(t, dir, "empty.pem", nil), goodKey, "cert_file", "no PEM data"},
		{"key as cert", goodKey, good, "cert_file", "holds a private key, not a certificate"},
		{"cert as key", good, good, "key_file", "holds a certificate, not a private key"},
		{"other key", good, "testdata/certs/key.pem", "key_file", "the private key does not match the certificate in cert_file"},
		{"garbage key", good, writeFile(t, dir, "garbage.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("x")})), "key_file", "failed to parse private key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadKeyPair(tt.cert, tt.key)
			var fe *TLSFileError
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v (%T), want *TLSFileError", err, err)
			}
			if fe.Field != tt.field || !strings.Contains(fe.Reason, tt.reason) {
				t.Errorf("err = %+v, want field %s, reason containing %q", fe, tt.field, tt.reason)
			}
			if msg := err.Error(); strings.Contains(msg, "tls:") || strings.Contains(msg, "x509:") || strings.Contains(msg, "open ") {
				t.Errorf("message keeps a library prefix: %q", msg)
			}
		})
	}
}

func TestLoadCertPool(t *testing.T) {
	dir := t.TempDir()
	if pool, err := LoadCertPool("testdata/certs/ca.pem"); err != nil || pool == nil {
		t.Fatalf("LoadCertPool(ca.pem) = %v, %v", pool, err)
	}
	for name, c := range map[string]struct{ data, reason string }{
		"empty":   {"", "no PEM data"},
		"text":    {"hello\n", "no PEM data"},
		"key":     {string(mustRead(t, "testdata/certs/key.pem")), "no CERTIFICATE block (found PRIVATE KEY)"},
		"corrupt": {string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}})), "certificate 1 does not parse"},
	} {
		_, err := LoadCertPool(writeFile(t, dir, name, []byte(c.data)))
		var fe *TLSFileError
		if !errors.As(err, &fe) || fe.Field != "ca_file" || !strings.Contains(fe.Reason, c.reason) {
			t.Errorf("%s: err = %v, want ca_file: %q", name, err, c.reason)
		}
	}
}

// TestTLSDiagnostics: every tls block (listener, consul, upstream) loads its
// files on Parse, as validate, start and reload all do, and reports at the
// attribute of the file at fault with the field name, never "tls: tls:".
func TestTLSDiagnostics(t *testing.T) {
	dir := t.TempDir()
	rsaCert, rsaKey := rsaPair(t, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	expired, expiredKey := writeFile(t, dir, "old.pem", rsaCert), writeFile(t, dir, "old.key", rsaKey)
	dangling := filepath.Join(dir, "dangling.pem")
	if err := os.Symlink(filepath.Join(dir, "gone.pem"), dangling); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(dir, "linked.pem")
	if err := os.Symlink(expired, linked); err != nil {
		t.Fatal(err)
	}
	src := `
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "` + linked + `"
    key_file  = "` + expiredKey + `"
  }
}
consul {
  tls {
    ca_file   = "` + dangling + `"
    cert_file = "testdata/certs/cert.pem"
    key_file  = "` + expiredKey + `"
  }
}
upstream "web" {
  route {}
  backend "a" {
    address = "https://127.0.0.1:9443"
  }
  tls {
    ca_file = "` + expiredKey + `"
  }
}
`
	got := parseErrors(t, src)
	for _, want := range []string{
		// A symbolic link to a regular file is followed; the certificate
		// it leads to has expired: a warning, not an error.
		`test.hcl:5:17: warning: Expired certificate: listener "public" tls cert_file: "` + linked + `" (CN=rsa.test) expired at `,
		`test.hcl:11:17: Dangling symbolic link: consul tls ca_file: "` + dangling + `" is a symbolic link to "` + filepath.Join(dir, "gone.pem") + `", which cannot be read: no such file or directory.`,
		`test.hcl:13:17: Invalid private key: consul tls key_file: "` + expiredKey + `": the private key does not match the certificate in cert_file.`,
		`test.hcl:22:15: Invalid CA file: upstream "web" tls ca_file: "` + expiredKey + `": no CERTIFICATE block (found RSA PRIVATE KEY).`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing\n  %s\nin\n%s", want, got)
		}
	}
	if strings.Contains(got, "tls: ") || strings.Contains(got, "x509: ") {
		t.Errorf("library prefix in:\n%s", got)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

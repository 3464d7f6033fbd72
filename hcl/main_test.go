package hcl

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	update   = flag.Bool("update", false, "rewrite the testdata .golden files")
	genCerts = flag.Bool("gencerts", false, "regenerate testdata/certs")
)

const certDir = "testdata/certs"

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests never see the real CONSUL_HTTP_* environment.
	LookupEnv = func(string) (string, bool) { return "", false }
	if err := ensureCerts(*genCerts); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// ensureCerts writes the test certificates into testdata/certs when one of
// them is missing or force is set; they are committed so the testdata is
// self-contained:
//
//   - cert.pem (also copied to ca.pem) and key.pem: a self-signed ECDSA
//     certificate for localhost/127.0.0.1, valid 2025..2125;
//   - expired.pem / expired-key.pem: the same, valid 2020..2021;
//   - future.pem / future-key.pem: the same, valid 2120..2125;
//   - other-key.pem: a key that matches none of them.
func ensureCerts(force bool) error {
	names := []string{"ca.pem", "cert.pem", "key.pem", "expired.pem", "expired-key.pem", "future.pem", "future-key.pem", "other-key.pem"}
	if !force {
		missing := false
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(certDir, n)); err != nil {
				missing = true
			}
		}
		if !missing {
			return nil
		}
	}
	files := map[string][]byte{}
	for _, c := range []struct {
		name          string
		from, until   time.Time
		certAs, keyAs []string
	}{
		{"good", time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC), []string{"cert.pem", "ca.pem"}, []string{"key.pem"}},
		{"expired", time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2021, 1, 1, 0, 0, 0, 0, time.UTC), []string{"expired.pem"}, []string{"expired-key.pem"}},
		{"future", time.Date(2120, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC), []string{"future.pem"}, []string{"future-key.pem"}},
	} {
		certPEM, keyPEM, err := selfSigned(c.from, c.until)
		if err != nil {
			return err
		}
		for _, n := range c.certAs {
			files[n] = certPEM
		}
		for _, n := range c.keyAs {
			files[n] = keyPEM
		}
	}
	_, otherKey, err := selfSigned(time.Now(), time.Now().Add(time.Hour))
	if err != nil {
		return err
	}
	files["other-key.pem"] = otherKey
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// selfSigned returns a PEM self-signed ECDSA CA certificate for
// localhost/127.0.0.1 valid from..until, and its PKCS #8 key.
func selfSigned(from, until time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             from,
		NotAfter:              until,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// wantErrorAt parses src as a.hcl and fails t unless it has an error at the
// position of at in src ("2nd X": the second X) whose text contains want;
// label names the case. It returns the diagnostics, one per line.
func wantErrorAt(t *testing.T, src, at, want, label string) string {
	t.Helper()
	_, diags := Parse("a.hcl", []byte(src))
	got := linesOf(diags)
	pos := posOf(src, at)
	if second, ok := strings.CutPrefix(at, "2nd "); ok {
		first := strings.Index(src, second) + 1
		pos = posOf(src[:first]+strings.Repeat("\x00", len(second)-1)+src[first+len(second)-1:], second)
	}
	if !diags.HasErrors() || !strings.Contains(got, "a.hcl:"+pos+": ") || !strings.Contains(got, want) {
		t.Errorf("%s:\n%s\nwant an error at a.hcl:%s containing %q", label, got, pos, want)
	}
	return got
}

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

// ensureCerts writes a self-signed ECDSA certificate for localhost/127.0.0.1
// (cert.pem, also copied to ca.pem) and its key (key.pem) into testdata/certs
// when they are missing or force is set. The configuration checks only need
// the files to exist; they are committed so the testdata is self-contained.
func ensureCerts(force bool) error {
	names := []string{"ca.pem", "cert.pem", "key.pem"}
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
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return err
	}
	for name, data := range map[string][]byte{"ca.pem": certPEM, "cert.pem": certPEM, "key.pem": keyPEM} {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

package agent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// meshCA is a Connect CA root the tests own: the Consul dev agent is
// started with it (connect { ca_config { private_key, root_cert } }), so
// Consul signs its leaves with it and the tests can issue certificates
// that chain to a trusted root yet are expired, not SPIFFE, or of another
// trust domain.
type meshCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var meshSerial atomic.Int64

func newMeshCA(t testing.TB) *meshCA { return newNamedMeshCA(t, "impulse test Connect CA") }

// newNamedMeshCA is a CA whose root's common name is cn.
func newNamedMeshCA(t testing.TB, cn string) *meshCA {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(meshSerial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &meshCA{cert: c, key: k}
}

// pems returns ca's private key and root certificate, PEM.
func (ca *meshCA) pems(t testing.TB) (key, root string) {
	der, err := x509.MarshalECPrivateKey(ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))),
		strings.TrimSpace(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})))
}

// consulConfig is the Consul agent configuration that makes ca the
// cluster's Connect CA.
func (ca *meshCA) consulConfig(t testing.TB) string {
	key, root := ca.pems(t)
	return fmt.Sprintf("connect {\n  enabled = true\n  ca_config {\n    private_key = %q\n    root_cert = %q\n  }\n}\n", key, root)
}

// issue signs a client certificate with the URI SANs uris, valid from
// notBefore to notAfter (zero: from an hour ago for a day).
func (ca *meshCA) issue(t testing.TB, uris []string, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if notBefore.IsZero() {
		notBefore, notAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(meshSerial.Add(1)), Subject: pkix.Name{CommonName: "test peer"},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k, Leaf: leaf}
}

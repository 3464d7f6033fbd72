package mesh

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// testCA is a Connect-like CA: a root naming its trust domain in a URI
// SAN, optionally signing through an intermediate.
type testCA struct {
	td   string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var testSerial atomic.Int64

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t testing.TB, tmpl, parent *x509.Certificate, pub any, key *ecdsa.PrivateKey) *x509.Certificate {
	t.Helper()
	tmpl.SerialNumber = big.NewInt(testSerial.Add(1))
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func caTemplate(name, td string) *x509.Certificate {
	u, _ := url.Parse("spiffe://" + td)
	return &x509.Certificate{Subject: pkix.Name{CommonName: name}, URIs: []*url.URL{u},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature, BasicConstraintsValid: true, IsCA: true}
}

func newTestCA(t testing.TB, td string) *testCA {
	t.Helper()
	k := newKey(t)
	tmpl := caTemplate("root "+td, td)
	return &testCA{td: td, cert: sign(t, tmpl, tmpl, &k.PublicKey, k), key: k}
}

// intermediate returns a CA signed by ca (same trust domain).
func (ca *testCA) intermediate(t testing.TB) *testCA {
	t.Helper()
	k := newKey(t)
	return &testCA{td: ca.td, cert: sign(t, caTemplate("intermediate "+ca.td, ca.td), ca.cert, &k.PublicKey, ca.key), key: k}
}

func (ca *testCA) pem() string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}))
}

// leafOpts describes a leaf: its URI SANs (none: no SAN), DNS names,
// validity (zero: from an hour ago for a day) and usages (nil: both).
type leafOpts struct {
	uris      []string
	dns       []string
	notBefore time.Time
	notAfter  time.Time
	usages    []x509.ExtKeyUsage
}

// leaf issues a leaf signed by ca; chain are the intermediates to send
// after it.
func (ca *testCA) leaf(t testing.TB, o leafOpts, chain ...*testCA) tls.Certificate {
	t.Helper()
	k := newKey(t)
	if o.notBefore.IsZero() {
		o.notBefore = time.Now().Add(-time.Hour)
	}
	if o.notAfter.IsZero() {
		o.notAfter = time.Now().Add(24 * time.Hour)
	}
	if o.usages == nil {
		o.usages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	}
	tmpl := &x509.Certificate{Subject: pkix.Name{CommonName: "leaf"}, NotBefore: o.notBefore, NotAfter: o.notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: o.usages, DNSNames: o.dns}
	for _, s := range o.uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	c := sign(t, tmpl, ca.cert, &k.PublicKey, ca.key)
	out := tls.Certificate{Certificate: [][]byte{c.Raw}, PrivateKey: k, Leaf: c}
	for _, x := range chain {
		out.Certificate = append(out.Certificate, x.cert.Raw)
	}
	return out
}

// svcURI is the SPIFFE ID of service svc in dc1 of ca's trust domain.
func (ca *testCA) svcURI(svc string) string {
	return "spiffe://" + ca.td + "/ns/default/dc/dc1/svc/" + svc
}

// chainOf parses a tls.Certificate's chain as a peer would receive it.
func chainOf(t testing.TB, c tls.Certificate) []*x509.Certificate {
	t.Helper()
	out := make([]*x509.Certificate, 0, len(c.Certificate))
	for _, der := range c.Certificate {
		x, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, x)
	}
	return out
}

func bundleOf(t testing.TB, td string, roots ...Root) *TrustBundle {
	t.Helper()
	b, err := NewTrustBundle(td, roots)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

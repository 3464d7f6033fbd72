package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

// leaf makes a self-signed certificate for dns (and one IP) expiring at
// notAfter; rsaKey picks an RSA key instead of ECDSA P-256.
func leaf(t *testing.T, cn string, notAfter time.Time, rsaKey bool, dns ...string) tls.Certificate {
	t.Helper()
	var priv any
	var pub any
	if rsaKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		priv, pub = k, &k.PublicKey
	} else {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		priv, pub = k, &k.PublicKey
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter,
		DNSNames: dns, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
}

func TestCertificateBySNI(t *testing.T) {
	exp := time.Now().Add(48 * time.Hour).Truncate(time.Second)
	def := leaf(t, "default", exp, false, "default.test")
	a := leaf(t, "a", exp, false, "a.test")
	wild := leaf(t, "wild", exp, false, "*.b.test")
	exactB := leaf(t, "exact-b", exp, false, "y.b.test")
	defWild := leaf(t, "def-wild", exp, false, "*.default.test") // loses to the default's exact name
	s, err := New(Config{Default: def, Certificates: []tls.Certificate{a, wild, exactB, defWild}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ sni, want string }{
		{"a.test", "a"},
		{"A.Test.", "a"},
		{"x.b.test", "wild"},
		{"X.B.TEST", "wild"},
		{"y.b.test", "exact-b"}, // exact before wildcard
		{"b.test", "default"},   // a wildcard covers one label, not none
		{"z.x.b.test", "default"},
		{"unknown.test", "default"},
		{"", "default"},
		{"default.test", "default"},
		{"w.default.test", "def-wild"},
		{".b.test", "default"},
	} {
		c, err := s.GetCertificate(&tls.ClientHelloInfo{ServerName: tc.sni})
		if err != nil || c == nil {
			t.Fatalf("%q: %v, %v", tc.sni, c, err)
		}
		if got := c.Leaf.Subject.CommonName; got != tc.want {
			t.Errorf("SNI %q: got %q, want %q", tc.sni, got, tc.want)
		}
	}
}

func TestCertificatePicksWhatTheClientSupports(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	ec := leaf(t, "ec", exp, false, "dual.test")
	rs := leaf(t, "rsa", exp, true, "dual.test")
	s, err := New(Config{Default: leaf(t, "default", exp, false), Certificates: []tls.Certificate{ec, rs}})
	if err != nil {
		t.Fatal(err)
	}
	// A TLS 1.2 client offering only RSA signatures and RSA key exchange.
	rsaOnly := &tls.ClientHelloInfo{
		ServerName: "dual.test", SupportedVersions: []uint16{tls.VersionTLS12},
		CipherSuites:     []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256},
		SupportedCurves:  []tls.CurveID{tls.X25519},
		SupportedPoints:  []uint8{0},
		SignatureSchemes: []tls.SignatureScheme{tls.PSSWithSHA256, tls.PKCS1WithSHA256},
	}
	if got := s.Certificate("dual.test", rsaOnly).Leaf.Subject.CommonName; got != "rsa" {
		t.Errorf("RSA-only client got %q", got)
	}
	if got := s.Certificate("dual.test", nil).Leaf.Subject.CommonName; got != "ec" {
		t.Errorf("without a hello: %q, want the first", got)
	}
}

func TestNewErrors(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	def := leaf(t, "default", exp, false, "d.test")
	noSAN := leaf(t, "ip-only", exp, false)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
		idx  int // CertificateError index, -2: another error
	}{
		{"no default", Config{}, "default certificate: no certificate", -1},
		{"default does not parse", Config{Default: tls.Certificate{Certificate: [][]byte{[]byte("junk")}}}, "default certificate:", -1},
		{"no DNS SAN", Config{Default: def, Certificates: []tls.Certificate{leaf(t, "ok", exp, false, "ok.test"), noSAN}}, "certificate 2: no DNS name", 1},
		{"request without CAs", Config{Default: def, ClientAuth: ClientAuthRequest}, `"request" needs client CAs`, -2},
		{"require without CAs", Config{Default: def, ClientAuth: ClientAuthRequire}, `"require" needs client CAs`, -2},
		{"unknown mode", Config{Default: def, ClientAuth: 7}, "unknown client auth 7", -2},
	} {
		_, err := New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
			continue
		}
		var ce *CertificateError
		if got := errors.As(err, &ce); got != (tc.idx > -2) || (got && ce.Index != tc.idx) {
			t.Errorf("%s: %T %+v, want index %d", tc.name, err, ce, tc.idx)
		}
	}
	// The default needs no DNS SAN: it is chosen by elimination.
	if _, err := New(Config{Default: noSAN}); err != nil {
		t.Errorf("IP-only default: %v", err)
	}
}

func TestClientAuthMapping(t *testing.T) {
	def := leaf(t, "default", time.Now().Add(time.Hour), false, "d.test")
	pool := x509.NewCertPool()
	for _, tc := range []struct {
		word string
		mode ClientAuth
		tls  tls.ClientAuthType
	}{
		{"none", ClientAuthNone, tls.NoClientCert},
		{"request", ClientAuthRequest, tls.VerifyClientCertIfGiven},
		{"require", ClientAuthRequire, tls.RequireAndVerifyClientCert},
	} {
		mode, err := ParseClientAuth(tc.word)
		if err != nil || mode != tc.mode || mode.String() != tc.word {
			t.Fatalf("ParseClientAuth(%q) = %v, %v", tc.word, mode, err)
		}
		s, err := New(Config{Default: def, ClientAuth: mode, ClientCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		c := s.ServerConfig(tls.VersionTLS12)
		if c.ClientAuth != tc.tls || c.ClientCAs != pool || c.MinVersion != tls.VersionTLS12 || c.GetCertificate == nil || len(c.Certificates) != 0 {
			t.Errorf("%s: %+v", tc.word, c)
		}
		if s.ClientAuth() != mode {
			t.Errorf("%s: ClientAuth() = %v", tc.word, s.ClientAuth())
		}
	}
	if _, err := ParseClientAuth("optional"); err == nil || !strings.Contains(err.Error(), "none, request, require") {
		t.Errorf("ParseClientAuth(optional) = %v", err)
	}
}

func TestExpiries(t *testing.T) {
	soon := time.Now().Add(time.Hour).Truncate(time.Second).UTC()
	later := soon.Add(24 * time.Hour)
	s, err := New(Config{
		Default: leaf(t, "default", later, false, "d.test"),
		Certificates: []tls.Certificate{
			leaf(t, "a", later, false, "A.test", "www.a.test"),
			leaf(t, "a-rsa", soon, true, "a.test"), // same first name: the earlier expiry
			leaf(t, "w", soon, false, "*.b.test"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := s.Expiries()
	want := map[string]time.Time{"default": later, "a.test": soon, "*.b.test": soon}
	if len(got) != len(want) {
		t.Fatalf("Expiries() = %v, want %v", got, want)
	}
	for k, v := range want {
		if !got[k].Equal(v) {
			t.Errorf("Expiries()[%q] = %v, want %v", k, got[k], v)
		}
	}
	got["default"] = time.Time{}
	if s.Expiries()["default"].IsZero() {
		t.Error("Expiries() is not a copy")
	}
}

func TestIdentityXFCC(t *testing.T) {
	u1, _ := url.Parse("spiffe://example.org/ns/web")
	u2, _ := url.Parse("https://x.test/a;b=c")
	for _, tc := range []struct {
		id   Identity
		want string
	}{
		{Identity{Hash: "ab12", Subject: "CN=client,O=Example"}, `Hash=ab12;Subject="CN=client,O=Example"`},
		{Identity{Hash: "ab12", Subject: `CN=a\"b\,c`, URIs: []string{u1.String(), u2.String()}, DNSNames: []string{"c.test", "d.test"}},
			`Hash=ab12;Subject="CN=a\"b\,c";URI=spiffe://example.org/ns/web;URI="https://x.test/a;b=c";DNS=c.test;DNS=d.test`},
		{Identity{Hash: "ab12", Subject: "CN=x\x01y", DNSNames: []string{`we"ird=`}}, `Hash=ab12;Subject="CN=x\01y";DNS="we\"ird="`},
	} {
		if got := tc.id.XFCC(); got != tc.want {
			t.Errorf("XFCC() = %s\nwant      %s", got, tc.want)
		}
	}
}

func TestVerifiedIdentity(t *testing.T) {
	c := leaf(t, "client", time.Now().Add(time.Hour), false, "client.test")
	cert, _ := x509.ParseCertificate(c.Certificate[0])
	cert.URIs = []*url.URL{{Scheme: "spiffe", Host: "example.org", Path: "/c"}}
	if _, ok := VerifiedIdentity(nil); ok {
		t.Error("nil state has an identity")
	}
	if _, ok := VerifiedIdentity(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}); ok {
		t.Error("an unverified certificate is an identity")
	}
	id, ok := VerifiedIdentity(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}, VerifiedChains: [][]*x509.Certificate{{cert}}})
	if !ok || len(id.Hash) != 64 || id.Subject != "CN=client" || len(id.URIs) != 1 || id.URIs[0] != "spiffe://example.org/c" || id.DNSNames[0] != "client.test" {
		t.Errorf("identity = %+v, %v", id, ok)
	}
}

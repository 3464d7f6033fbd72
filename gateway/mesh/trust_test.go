package mesh

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"testing"
	"time"
)

func reasonOf(err error) string {
	var pe *PeerError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	if err == nil {
		return ""
	}
	return "other: " + err.Error()
}

// TestVerifyClient: a Connect peer with a valid certificate is identified;
// every other kind of client certificate of case M01 is refused, each with
// its reason.
func TestVerifyClient(t *testing.T) {
	ca := newTestCA(t, td)
	inter := ca.intermediate(t)
	foreign := newTestCA(t, "99999999-0000-0000-0000-000000000000.consul")
	var v Verifier
	v.SetBundle(bundleOf(t, td, Root{ID: "r1", CertPEM: ca.pem()}))
	server := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}

	cases := []struct {
		name   string
		cert   []*x509.Certificate
		reason string
	}{
		{"client leaf", chainOf(t, ca.leaf(t, leafOpts{uris: []string{ca.svcURI("client")}})), ""},
		{"through an intermediate it sends", chainOf(t, inter.leaf(t, leafOpts{uris: []string{ca.svcURI("client")}}, inter)), ""},
		{"no certificate", nil, ReasonNoCertificate},
		{"foreign CA", chainOf(t, foreign.leaf(t, leafOpts{uris: []string{foreign.svcURI("client")}})), ReasonUntrusted},
		{"expired", chainOf(t, ca.leaf(t, leafOpts{uris: []string{ca.svcURI("client")},
			notBefore: time.Now().Add(-48 * time.Hour), notAfter: time.Now().Add(-time.Minute)})), ReasonExpired},
		{"not yet valid", chainOf(t, ca.leaf(t, leafOpts{uris: []string{ca.svcURI("client")},
			notBefore: time.Now().Add(time.Hour)})), ReasonExpired},
		{"server-only usage", chainOf(t, ca.leaf(t, leafOpts{uris: []string{ca.svcURI("client")}, usages: server})), ReasonUntrusted},
		{"intermediate neither sent nor known", chainOf(t, inter.leaf(t, leafOpts{uris: []string{ca.svcURI("client")}})), ReasonUntrusted},
		{"non-SPIFFE URI", chainOf(t, ca.leaf(t, leafOpts{uris: []string{"https://client.example"}})), ReasonBadIdentity},
		{"two URI SANs", chainOf(t, ca.leaf(t, leafOpts{uris: []string{ca.svcURI("client"), ca.svcURI("web")}})), ReasonBadIdentity},
		{"no URI SAN, a DNS name", chainOf(t, ca.leaf(t, leafOpts{dns: []string{"client.service.consul"}})), ReasonBadIdentity},
		{"an agent's identity", chainOf(t, ca.leaf(t, leafOpts{uris: []string{"spiffe://" + td + "/agent/client/dc/dc1/id/abc"}})), ReasonBadIdentity},
		{"another trust domain under our root", chainOf(t, ca.leaf(t, leafOpts{uris: []string{foreign.svcURI("client")}})), ReasonTrustDomain},
	}
	for _, c := range cases {
		id, err := v.VerifyClient(c.cert)
		if got := reasonOf(err); got != c.reason {
			t.Errorf("%s: reason %q (%v), want %q", c.name, got, err, c.reason)
		}
		if c.reason == "" && (id.Service != "client" || id.TrustDomain != td || id.Datacenter != "dc1") {
			t.Errorf("%s: identity %+v", c.name, id)
		}
	}

	// The bundle's own intermediates (Consul lists them with a root).
	v.SetBundle(bundleOf(t, td, Root{ID: "r1", CertPEM: ca.pem(), IntermediatePEMs: []string{inter.pem()}}))
	if _, err := v.VerifyClient(chainOf(t, inter.leaf(t, leafOpts{uris: []string{ca.svcURI("client")}}))); err != nil {
		t.Errorf("an intermediate listed with the root: %v", err)
	}
	var none Verifier
	if r := reasonOf(func() error { _, err := none.VerifyClient(cases[0].cert); return err }()); r != ReasonNoRoots {
		t.Errorf("no bundle: %q, want %q", r, ReasonNoRoots)
	}
}

// TestVerifyAcrossRotation: during a rotation both roots are trusted; once
// the old root leaves the roots, its leaves are refused — each from the
// next verification on, without rebuilding anything else.
func TestVerifyAcrossRotation(t *testing.T) {
	old, cur := newTestCA(t, td), newTestCA(t, td)
	oldLeaf := chainOf(t, old.leaf(t, leafOpts{uris: []string{old.svcURI("client")}}))
	newLeaf := chainOf(t, cur.leaf(t, leafOpts{uris: []string{cur.svcURI("client")}}))
	var v Verifier
	v.SetBundle(bundleOf(t, td, Root{ID: "old", CertPEM: old.pem()}))
	if _, err := v.VerifyClient(newLeaf); reasonOf(err) != ReasonUntrusted {
		t.Fatalf("a leaf of a root not yet listed: %v", err)
	}
	v.SetBundle(bundleOf(t, td, Root{ID: "old", CertPEM: old.pem()}, Root{ID: "new", CertPEM: cur.pem()}))
	for _, c := range [][]*x509.Certificate{oldLeaf, newLeaf} {
		if _, err := v.VerifyClient(c); err != nil {
			t.Fatalf("during the rotation: %v", err)
		}
	}
	v.SetBundle(bundleOf(t, td, Root{ID: "new", CertPEM: cur.pem()}))
	if _, err := v.VerifyClient(oldLeaf); reasonOf(err) != ReasonUntrusted {
		t.Fatalf("a leaf of a root gone: %v", err)
	}
}

func TestVerifyServer(t *testing.T) {
	ca := newTestCA(t, td)
	var v Verifier
	v.SetBundle(bundleOf(t, td, Root{ID: "r1", CertPEM: ca.pem()}))
	want := ServiceID{Service: "db", Datacenter: "dc1"}
	db := chainOf(t, ca.leaf(t, leafOpts{uris: []string{ca.svcURI("db")}, dns: []string{"other.example"}}))
	if id, err := v.VerifyServer(db, want); err != nil || id.Service != "db" {
		t.Fatalf("the real db (a DNS name that is not db's, ignored): %+v %v", id, err)
	}
	cases := map[string][]*x509.Certificate{
		"an impostor with a valid leaf of another service": chainOf(t, ca.leaf(t, leafOpts{uris: []string{ca.svcURI("other")}, dns: []string{"db"}})),
		"db in another datacenter":                         chainOf(t, ca.leaf(t, leafOpts{uris: []string{"spiffe://" + td + "/ns/default/dc/dc2/svc/db"}})),
		"db in another namespace":                          chainOf(t, ca.leaf(t, leafOpts{uris: []string{"spiffe://" + td + "/ns/ops/dc/dc1/svc/db"}})),
		"db in another partition":                          chainOf(t, ca.leaf(t, leafOpts{uris: []string{"spiffe://" + td + "/ap/p/ns/default/dc/dc1/svc/db"}})),
	}
	for name, c := range cases {
		if _, err := v.VerifyServer(c, want); reasonOf(err) != ReasonWrongService {
			t.Errorf("%s: %v, want %s", name, err, ReasonWrongService)
		}
	}
	client := chainOf(t, ca.leaf(t, leafOpts{uris: []string{ca.svcURI("db")}, usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}))
	if _, err := v.VerifyServer(client, want); reasonOf(err) != ReasonUntrusted {
		t.Errorf("a client-only certificate as a server: %v", err)
	}
}

func TestNewTrustBundle(t *testing.T) {
	ca := newTestCA(t, td)
	b, err := NewTrustBundle("", []Root{{ID: "r", CertPEM: ca.pem()}})
	if err != nil || len(b.TrustDomains()) != 1 || b.TrustDomains()[0] != td {
		t.Fatalf("the trust domain from the root's URI SAN: %v %v", b, err)
	}
	for name, roots := range map[string][]Root{
		"no root":          nil,
		"no PEM":           {{ID: "r", CertPEM: "junk"}},
		"bad intermediate": {{ID: "r", CertPEM: ca.pem(), IntermediatePEMs: []string{"junk"}}},
	} {
		if _, err := NewTrustBundle(td, roots); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := NewTrustBundle("Bad Domain", []Root{{ID: "r", CertPEM: ca.pem()}}); err == nil {
		t.Error("an invalid trust domain: no error")
	}
}

// handshake runs a TLS handshake between a mesh listener's config and a
// client's over loopback TCP (kernel-buffered: net.Pipe's unbuffered
// writes stall TLS 1.3's post-handshake messages) and returns both
// sides' errors.
func handshake(t *testing.T, srv, cli *tls.Config) (serverErr, clientErr error, resumed bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	b, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(a, srv)
		err := s.HandshakeContext(ctx)
		if err == nil {
			// TLS 1.3: the client's certificate is checked after the
			// client's handshake returns; read to let it learn the result.
			_, _ = s.Write([]byte("ok"))
		}
		a.Close()
		done <- err
	}()
	c := tls.Client(b, cli)
	clientErr = c.HandshakeContext(ctx)
	if clientErr == nil {
		buf := make([]byte, 2)
		_, clientErr = c.Read(buf)
	}
	resumed = c.ConnectionState().DidResume
	b.Close()
	return <-done, clientErr, resumed
}

// TestTLSHandshakes: the verifier's functions in crypto/tls configs of a
// mesh listener and of a client dialling it; a roots change applies to
// the next handshake, resumed ones included (VerifyConnection runs on
// resumption).
func TestTLSHandshakes(t *testing.T) {
	ca, other := newTestCA(t, td), newTestCA(t, td)
	var v Verifier
	v.SetBundle(bundleOf(t, td, Root{ID: "r1", CertPEM: ca.pem()}))
	webCert := ca.leaf(t, leafOpts{uris: []string{ca.svcURI("web")}})
	clientCert := ca.leaf(t, leafOpts{uris: []string{ca.svcURI("client")}})
	srv := &tls.Config{Certificates: []tls.Certificate{webCert}, ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: v.VerifyClientConnection, MinVersion: tls.VersionTLS12}
	cli := &tls.Config{Certificates: []tls.Certificate{clientCert}, InsecureSkipVerify: true,
		VerifyConnection:   v.ServerCheck(ServiceID{Service: "web", Datacenter: "dc1"}),
		ClientSessionCache: tls.NewLRUClientSessionCache(4), ServerName: "web.default.dc1.internal." + td}
	if se, ce, _ := handshake(t, srv, cli); se != nil || ce != nil {
		t.Fatalf("the Connect peers: server %v, client %v", se, ce)
	}
	if se, ce, resumed := handshake(t, srv, cli); se != nil || ce != nil || !resumed {
		t.Fatalf("resumed: server %v, client %v, resumed %v", se, ce, resumed)
	}
	wrong := cli.Clone()
	wrong.VerifyConnection = v.ServerCheck(ServiceID{Service: "db", Datacenter: "dc1"})
	wrong.ClientSessionCache = nil
	if _, ce, _ := handshake(t, srv, wrong); reasonOf(ce) != ReasonWrongService {
		t.Fatalf("dialling db, reached web: client %v", ce)
	}
	anon := cli.Clone()
	anon.Certificates, anon.ClientSessionCache = nil, nil
	if se, _, _ := handshake(t, srv, anon); se == nil { // crypto/tls refuses it before VerifyConnection
		t.Fatal("no client certificate: accepted")
	}
	// The roots change: the next handshake — resumed from the cache
	// filled above — is checked against the new bundle.
	v.SetBundle(bundleOf(t, td, Root{ID: "r2", CertPEM: other.pem()}))
	se, ce, _ := handshake(t, srv, cli)
	if reasonOf(ce) != ReasonUntrusted || se == nil {
		t.Fatalf("after the roots changed: server %v, client %v; want both refused", se, ce)
	}
}

package mesh

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"
)

// serverSaw is what a test server learnt of a handshake.
type serverSaw struct {
	sni, alpn, client string
	err               error
}

// dialOutbound runs o.Handshake against a server presenting cert (and
// offering serverALPN, none when nil) over an in-memory connection.
func dialOutbound(t *testing.T, o *Outbound, cert tls.Certificate, serverALPN []string) (*tls.Conn, serverSaw, error) {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	var saw serverSaw
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := tls.Server(a, &tls.Config{
			Certificates: []tls.Certificate{cert},
			ClientAuth:   tls.RequireAnyClientCert,
			NextProtos:   serverALPN,
		})
		saw.err = s.Handshake()
		if saw.err == nil {
			cs := s.ConnectionState()
			saw.sni, saw.alpn = cs.ServerName, cs.NegotiatedProtocol
			if id, err := CertServiceID(cs.PeerCertificates[0]); err == nil {
				saw.client = id.String()
			}
		}
		a.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := o.Handshake(ctx, b)
	if err != nil {
		b.Close()
	}
	<-done
	return c, saw, err
}

// TestOutboundHandshake (case M04, without Consul): the gateway as web
// dials db with its leaf as the client certificate; only a server whose
// URI SAN is db's in dc1 under a current root is accepted — an impostor
// with a valid leaf of another service, or db's name under a foreign CA,
// is refused (DNS names are ignored); SNI and ALPN are Consul's.
func TestOutboundHandshake(t *testing.T) {
	ca, foreign := newTestCA(t, td), newTestCA(t, td)
	in := NewInbound("web")
	in.SetRoots(bundleOf(t, td, Root{ID: "r1", CertPEM: ca.pem()}))
	web := ca.leaf(t, leafOpts{uris: []string{ca.svcURI("web")}})
	want := ServiceID{Service: "db", Datacenter: "dc1"}
	o := in.Outbound(want, ALPNHTTP1)
	db := ca.leaf(t, leafOpts{uris: []string{ca.svcURI("db")}, dns: []string{"not-db.example"}})

	if _, _, err := dialOutbound(t, o, db, nil); !errors.Is(err, ErrNoLeaf) {
		t.Fatalf("without a leaf: %v, want ErrNoLeaf", err)
	}
	in.SetLeaf(&web)

	c, saw, err := dialOutbound(t, o, db, []string{"http/1.1", "h2"})
	if err != nil || saw.err != nil {
		t.Fatalf("the real db: client %v, server %v", err, saw.err)
	}
	if wantSNI := "db.default.dc1.internal." + td; saw.sni != wantSNI || o.ServerName() != wantSNI {
		t.Errorf("SNI %q (ServerName %q), want %q", saw.sni, o.ServerName(), wantSNI)
	}
	if saw.alpn != "http/1.1" || c.ConnectionState().NegotiatedProtocol != "http/1.1" {
		t.Errorf("ALPN %q, want http/1.1", saw.alpn)
	}
	if saw.client != ca.svcURI("web") {
		t.Errorf("the server saw the client as %q, want %q", saw.client, ca.svcURI("web"))
	}

	// Consul's built-in proxy negotiates no ALPN: accepted.
	if _, _, err := dialOutbound(t, o, db, nil); err != nil {
		t.Errorf("a server without ALPN: %v", err)
	}
	// HTTP/2 upstreams offer h2 only.
	if _, saw, err := dialOutbound(t, in.Outbound(want, ALPNH2), db, []string{"http/1.1", "h2"}); err != nil || saw.alpn != "h2" {
		t.Errorf("ALPNH2: %v, ALPN %q", err, saw.alpn)
	}

	refused := map[string]struct {
		cert   tls.Certificate
		reason string
	}{
		"an impostor with a valid leaf of another service (and db's DNS name)": {
			ca.leaf(t, leafOpts{uris: []string{ca.svcURI("other")}, dns: []string{"db"}}), ReasonWrongService},
		"db in another datacenter": {
			ca.leaf(t, leafOpts{uris: []string{"spiffe://" + td + "/ns/default/dc/dc2/svc/db"}}), ReasonWrongService},
		"db's name under a foreign CA": {
			foreign.leaf(t, leafOpts{uris: []string{foreign.svcURI("db")}}), ReasonUntrusted},
		"an expired db leaf": {
			ca.leaf(t, leafOpts{uris: []string{ca.svcURI("db")}, notBefore: time.Now().Add(-2 * time.Hour),
				notAfter: time.Now().Add(-time.Hour)}), ReasonExpired},
	}
	for name, tc := range refused {
		_, saw, err := dialOutbound(t, o, tc.cert, nil)
		if reasonOf(err) != tc.reason {
			t.Errorf("%s: %v, want %s", name, err, tc.reason)
		}
		if saw.err == nil {
			t.Errorf("%s: the server completed the handshake", name)
		}
	}

	// No datacenter given: the leaf's (dc1).
	if _, saw, err := dialOutbound(t, in.Outbound(ServiceID{Service: "db"}, ALPNHTTP1), db, nil); err != nil ||
		saw.sni != "db.default.dc1.internal."+td {
		t.Errorf("the leaf's datacenter: %v, SNI %q", err, saw.sni)
	}

	// An expired leaf of our own is not sent.
	old := ca.leaf(t, leafOpts{uris: []string{ca.svcURI("web")}, notBefore: time.Now().Add(-2 * time.Hour),
		notAfter: time.Now().Add(-time.Hour)})
	in.SetLeaf(&old)
	if _, _, err := dialOutbound(t, o, db, nil); !errors.Is(err, ErrNoLeaf) {
		t.Errorf("with an expired leaf: %v, want ErrNoLeaf", err)
	}
}

// TestOutboundServerName: Consul's upstream SNI forms; none before roots.
func TestOutboundServerName(t *testing.T) {
	in := NewInbound("web")
	o := in.Outbound(ServiceID{Service: "DB", Datacenter: "dc1"}, ALPNHTTP1)
	if got := o.ServerName(); got != "" {
		t.Fatalf("before roots: %q", got)
	}
	ca := newTestCA(t, td)
	in.SetRoots(bundleOf(t, td, Root{ID: "r1", CertPEM: ca.pem()}))
	for want, id := range map[string]ServiceID{
		"db.default.dc1.internal." + td:       {Service: "DB", Datacenter: "dc1"},
		"db.ops.dc2.internal." + td:           {Service: "db", Namespace: "ops", Datacenter: "dc2"},
		"db.default.p1.dc1.internal-v1." + td: {Service: "db", Partition: "p1", Datacenter: "dc1"},
	} {
		if got := in.Outbound(id, ALPNHTTP1).ServerName(); got != want {
			t.Errorf("%+v: %q, want %q", id, got, want)
		}
	}
}

package mesh

import (
	"crypto/tls"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestInboundHandshakes: an Inbound's ServerTLS refuses every handshake
// until it has a leaf, roots and rules; then admits a Connect peer, refuses
// one without a certificate (counted no_certificate, which crypto/tls's
// RequireAnyClientCert would refuse uncounted), denies one an L4 intention
// denies, and stops serving a leaf past its NotAfter.
func TestInboundHandshakes(t *testing.T) {
	ca := newTestCA(t, td)
	in := NewInbound("web")
	var mu sync.Mutex
	counts := map[string]int{}
	in.SetObserver(func(result, source string) {
		mu.Lock()
		counts[result+"/"+source]++
		mu.Unlock()
	})
	srv := in.ServerTLS()
	client := ca.leaf(t, leafOpts{uris: []string{ca.svcURI("client")}})
	cli := &tls.Config{Certificates: []tls.Certificate{client}, InsecureSkipVerify: true}

	if se, _, _ := handshake(t, srv, cli); !errors.Is(se, ErrNoLeaf) {
		t.Fatalf("no leaf: server %v, want ErrNoLeaf", se)
	}
	leaf := ca.leaf(t, leafOpts{uris: []string{ca.svcURI("web")}})
	in.SetLeaf(&leaf)
	if se, _, _ := handshake(t, srv, cli); reasonOf(se) != ReasonNoRoots {
		t.Fatalf("no roots: server %v", se)
	}
	in.SetRoots(bundleOf(t, td, Root{ID: "r1", CertPEM: ca.pem()}))
	if se, _, _ := handshake(t, srv, cli); reasonOf(se) != ReasonNoIntentions {
		t.Fatalf("no intentions: server %v", se)
	}
	rules, _ := Compile([]Intention{{SourceName: "evil", DestinationName: "web", Action: "deny"}}, true)
	in.SetRules(rules)
	if se, ce, _ := handshake(t, srv, cli); se != nil || ce != nil {
		t.Fatalf("client: server %v, client %v", se, ce)
	}
	anon := &tls.Config{InsecureSkipVerify: true}
	if se, _, _ := handshake(t, srv, anon); reasonOf(se) != ReasonNoCertificate {
		t.Fatalf("no certificate: server %v", se)
	}
	evil := &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, leafOpts{uris: []string{ca.svcURI("evil")}})}, InsecureSkipVerify: true}
	var de *DeniedError
	if se, _, _ := handshake(t, srv, evil); !errors.As(se, &de) || de.Source.Service != "evil" {
		t.Fatalf("denied source: server %v", se)
	}
	in.now = func() time.Time { return leaf.Leaf.NotAfter.Add(time.Second) }
	if se, _, _ := handshake(t, srv, cli); !errors.Is(se, ErrNoLeaf) {
		t.Fatalf("expired leaf: server %v, want ErrNoLeaf", se)
	}
	mu.Lock()
	defer mu.Unlock()
	want := map[string]int{"no_roots/": 1, "no_intentions/client": 1, "allow/client": 1, "no_certificate/": 1, "deny/evil": 1}
	for k, n := range want {
		if counts[k] != n {
			t.Errorf("count %s = %d, want %d (all: %v)", k, counts[k], n, counts)
		}
	}
}

// TestInboundAuthorize: per request, the peer's identity from the
// verified handshake state against the current rules; a swap applies to
// the next request; no peer certificate or no rules deny.
func TestInboundAuthorize(t *testing.T) {
	ca := newTestCA(t, td)
	in := NewInbound("web")
	client := ca.leaf(t, leafOpts{uris: []string{ca.svcURI("client")}})
	cs := &tls.ConnectionState{PeerCertificates: chainOf(t, client)}
	if _, d := in.Authorize(cs, "GET", "web", "/", http.Header{}); d.Allow {
		t.Fatal("no rules: allowed")
	}
	l7, _ := Compile([]Intention{{SourceName: "client", DestinationName: "web", Permissions: []Permission{
		{Action: "deny", HTTP: &HTTPMatch{PathExact: "/admin"}}, {Action: "allow"}}}}, false)
	in.SetRules(l7)
	for path, allow := range map[string]bool{"/": true, "/admin": false, "/admin/x": true} {
		id, d := in.Authorize(cs, "GET", "web", path, http.Header{})
		if d.Allow != allow || id.Service != "client" {
			t.Errorf("%s: %+v from %v, want allow %v", path, d, id, allow)
		}
	}
	if _, d := in.Authorize(nil, "GET", "web", "/", http.Header{}); d.Allow {
		t.Error("no TLS state: allowed")
	}
	deny, _ := Compile([]Intention{{SourceName: "client", DestinationName: "web", Action: "deny"}}, true)
	in.SetRules(deny)
	if _, d := in.Authorize(cs, "GET", "web", "/", http.Header{}); d.Allow || d.By != ByL4 {
		t.Errorf("after an L4 deny: %+v", d)
	}
}

// BenchmarkInboundAuthorize is the per-request cost a mesh listener adds:
// the peer's identity read from its verified certificate, and the
// decision against 20 L7 intentions: 0 allocations once the connection's
// certificate is in the identity cache (~50 ns on the 2-core dev machine).
func BenchmarkInboundAuthorize(b *testing.B) {
	ca := newTestCA(b, td)
	in := NewInbound("web")
	var ints []Intention
	for i := range 19 {
		ints = append(ints, Intention{SourceName: "svc" + string(rune('a'+i)), DestinationName: "web", Action: "deny"})
	}
	ints = append(ints, Intention{SourceName: "client", DestinationName: "web", Permissions: []Permission{
		{Action: "deny", HTTP: &HTTPMatch{PathExact: "/admin"}}, {Action: "allow", HTTP: &HTTPMatch{PathPrefix: "/api/"}}}})
	rules, _ := Compile(ints, false)
	in.SetRules(rules)
	cs := &tls.ConnectionState{PeerCertificates: chainOf(b, ca.leaf(b, leafOpts{uris: []string{ca.svcURI("client")}}))}
	h := http.Header{}
	b.ReportAllocs()
	for b.Loop() {
		if _, d := in.Authorize(cs, "GET", "web", "/api/x", h); !d.Allow {
			b.Fatal("denied")
		}
	}
}

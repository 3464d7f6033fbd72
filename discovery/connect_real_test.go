package discovery

// Connect watches against a real Consul dev agent (Connect and its built-in
// CA are on in -dev).

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// rotationTimeout bounds the wait for a leaf renewed after a CA rotation:
// the agent spreads the renewals over 30 s after a root change (Consul's
// caChangeJitterWindow).
const rotationTimeout = 60 * time.Second

// startConnect runs watch(ctx, emit) in a goroutine; the test's cleanup
// stops it and requires context.Canceled.
func startConnect[T any](t *testing.T, watch func(context.Context, func(T)) error) *collector[T] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rec := &collector[T]{}
	done := make(chan error, 1)
	go func() { done <- watch(ctx, rec.emit) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("watch returned %v, want context.Canceled", err)
			}
		case <-time.After(2 * time.Second):
			t.Error("watch did not return within 2s of cancel")
		}
	})
	return rec
}

// waitLast waits until the latest value satisfies cond and returns it.
func waitLast[T any](t *testing.T, rec *collector[T], what string, timeout time.Duration, cond func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if all := rec.all(); len(all) > 0 && cond(all[len(all)-1]) {
			return all[len(all)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (%d values)", timeout, what, len(rec.all()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func parseCerts(t *testing.T, pemText string) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	rest := []byte(pemText)
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		t.Fatalf("no certificate in %q", pemText)
	}
	return out
}

// verifyLeaf checks that leaf's chain (its CertPEM) verifies against roots
// and that its key matches; it returns the leaf certificate.
func verifyLeaf(t *testing.T, leaf LeafCert, roots []CARoot) *x509.Certificate {
	t.Helper()
	if _, err := tls.X509KeyPair([]byte(leaf.CertPEM), []byte(leaf.PrivateKeyPEM)); err != nil {
		t.Fatalf("leaf key pair: %v", err)
	}
	chain := parseCerts(t, leaf.CertPEM)
	pool, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(parseCerts(t, r.RootCertPEM)[0])
	}
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("leaf %s does not verify against the roots: %v", leaf.SerialNumber, err)
	}
	return chain[0]
}

func TestConnectRootsAndLeafArrive(t *testing.T) {
	t.Parallel()
	a := consultest.Start(t)
	m, sink := newMetrics(t)
	c := newTestClient(t, a.Addr(), func(c *Config) { c.Metrics = m })
	roots := startConnect(t, c.WatchRoots)
	leaves := startConnect(t, func(ctx context.Context, emit func(LeafCert)) error { return c.WatchLeaf(ctx, "web", emit) })

	r := waitLast(t, roots, "roots", waitTimeout, func(CARoots) bool { return true })
	if !strings.HasSuffix(r.TrustDomain, ".consul") || r.ActiveRootID == "" || len(r.Roots) != 1 || !r.Roots[0].Active ||
		r.Roots[0].ID != r.ActiveRootID || r.Index == 0 || r.Time.IsZero() || r.Roots[0].NotAfter.IsZero() {
		t.Fatalf("roots %+v", r)
	}
	root := parseCerts(t, r.Roots[0].RootCertPEM)[0]
	if !root.IsCA || len(root.URIs) != 1 || root.URIs[0].String() != "spiffe://"+r.TrustDomain {
		t.Fatalf("root certificate: CA %v, URIs %v; want the trust domain %s", root.IsCA, root.URIs, r.TrustDomain)
	}

	l := waitLast(t, leaves, "a leaf", waitTimeout, func(LeafCert) bool { return true })
	wantURI := "spiffe://" + r.TrustDomain + "/ns/default/dc/dc1/svc/web"
	if l.Service != "web" || l.ServiceURI != wantURI || l.SerialNumber == "" || l.Index == 0 ||
		!l.ValidAfter.Before(time.Now()) || !l.ValidBefore.After(time.Now().Add(time.Hour)) {
		t.Fatalf("leaf %+v (key omitted), want URI %s", LeafCert{Service: l.Service, ServiceURI: l.ServiceURI,
			SerialNumber: l.SerialNumber, ValidAfter: l.ValidAfter, ValidBefore: l.ValidBefore, Index: l.Index}, wantURI)
	}
	cert := verifyLeaf(t, l, r.Roots)
	if len(cert.URIs) != 1 || cert.URIs[0].String() != wantURI {
		t.Fatalf("leaf URI SANs %v, want %s", cert.URIs, wantURI)
	}

	st := c.Status()
	if len(st) != 2 || st[0].Connect == nil || st[0].Connect.Kind != ConnectLeaf || st[1].Connect.Kind != ConnectRoots ||
		!st[0].Synced || !st[1].Synced || st[0].LastError != "" || st[1].LastIndex == 0 {
		t.Fatalf("status %+v", st)
	}
	waitFor(t, "the query duration of the roots and leaf watches", func() bool {
		return sink.sampleCount("impulse.discovery.query.duration;service="+RootsEndpoint+";outcome=ok") > 0 &&
			sink.sampleCount("impulse.discovery.query.duration;service="+LeafEndpoint+"web;outcome=ok") > 0
	})
	if n := len(roots.all()); n != 1 {
		t.Fatalf("%d roots emitted without a change, want 1", n)
	}
}

// TestConnectLeafRenewsOnCARotation: a CA rotation (the consul provider
// switched to a new key type, PUT /v1/connect/ca/configuration; Consul docs
// "Connect → Certificate Management → Root Certificate Rotation") adds the
// new root beside the old one, and the agent renews the leaf, which the
// blocking query delivers: signed under the new root, chained to the old one
// by the cross-signed intermediate.
func TestConnectLeafRenewsOnCARotation(t *testing.T) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr())
	roots := startConnect(t, c.WatchRoots)
	leaves := startConnect(t, func(ctx context.Context, emit func(LeafCert)) error { return c.WatchLeaf(ctx, "web", emit) })
	r0 := waitLast(t, roots, "roots", waitTimeout, func(CARoots) bool { return true })
	l0 := waitLast(t, leaves, "a leaf", waitTimeout, func(LeafCert) bool { return true })

	if _, err := a.Client().Connect().CASetConfig(&api.CAConfig{Provider: "consul",
		Config: map[string]any{"PrivateKeyType": "rsa", "PrivateKeyBits": 2048}}, nil); err != nil {
		t.Fatal(err)
	}
	r1 := waitLast(t, roots, "a second root", waitTimeout, func(r CARoots) bool { return len(r.Roots) == 2 })
	if r1.ActiveRootID == r0.ActiveRootID || r1.TrustDomain != r0.TrustDomain {
		t.Fatalf("after rotation: active %s (was %s), trust domain %s (was %s)", r1.ActiveRootID, r0.ActiveRootID, r1.TrustDomain, r0.TrustDomain)
	}
	var active, old CARoot
	for _, x := range r1.Roots {
		if x.Active {
			active = x
		} else {
			old = x
		}
	}
	if active.ID != r1.ActiveRootID || old.ID != r0.ActiveRootID || len(active.IntermediatePEMs) == 0 {
		t.Fatalf("roots after rotation %+v: want the new one active with the cross-signed intermediate", r1.Roots)
	}

	l1 := waitLast(t, leaves, "a renewed leaf", rotationTimeout, func(l LeafCert) bool { return l.SerialNumber != l0.SerialNumber })
	if l1.ServiceURI != l0.ServiceURI || l1.Index <= l0.Index {
		t.Fatalf("renewed leaf: URI %s (was %s), index %d (was %d)", l1.ServiceURI, l0.ServiceURI, l1.Index, l0.Index)
	}
	// Under the new root alone, and under the old root alone through the
	// intermediates the leaf carries (cross-signing).
	verifyLeaf(t, l1, []CARoot{active})
	verifyLeaf(t, l1, []CARoot{old})
	if n := len(parseCerts(t, l1.CertPEM)); n < 2 {
		t.Fatalf("renewed leaf carries %d certificates, want the leaf and the cross-signed intermediate", n)
	}
}

// upsertIntention creates or replaces the L4 intention src -> dst.
func upsertIntention(t *testing.T, a *consultest.Agent, src, dst, action string) {
	t.Helper()
	if _, err := a.Client().Connect().IntentionUpsert(&api.Intention{SourceName: src, DestinationName: dst,
		Action: api.IntentionAction(action)}, nil); err != nil {
		t.Fatal(err)
	}
}

func intentionSummary(in Intentions) string {
	var parts []string
	for _, x := range in.Intentions {
		act := x.Action
		if len(x.Permissions) > 0 {
			act = fmt.Sprintf("L7x%d", len(x.Permissions))
		}
		parts = append(parts, fmt.Sprintf("%s->%s:%s/%d", x.SourceName, x.DestinationName, act, x.Precedence))
	}
	return in.DefaultPolicy + "[" + strings.Join(parts, " ") + "]"
}

// TestConnectIntentionsSeenLive: intentions created, updated and deleted
// through the API (L4, and an L7 service-intentions config entry) reach the
// watch without a restart, in Consul's precedence order, with the ACL
// default policy of the reply.
func TestConnectIntentionsSeenLive(t *testing.T) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr())
	rec := startConnect(t, func(ctx context.Context, emit func(Intentions)) error { return c.WatchIntentions(ctx, "web", emit) })
	want := func(s string) Intentions {
		t.Helper()
		return waitLast(t, rec, s, waitTimeout, func(in Intentions) bool { return intentionSummary(in) == s })
	}
	first := want("allow[]") // dev mode: ACLs off, default allow
	if first.Service != "web" || first.Index == 0 {
		t.Fatalf("first %+v", first)
	}

	upsertIntention(t, a, "*", "web", "deny")
	upsertIntention(t, a, "client", "web", "allow")
	upsertIntention(t, a, "client", "db", "deny") // another destination: not reported
	want("allow[client->web:allow/9 *->web:deny/8]")

	upsertIntention(t, a, "client", "web", "deny") // update
	want("allow[client->web:deny/9 *->web:deny/8]")

	// L7: needs an HTTP protocol for web (service-defaults).
	cfg := a.Client().ConfigEntries()
	if _, _, err := cfg.Set(&api.ServiceConfigEntry{Kind: api.ServiceDefaults, Name: "web", Protocol: "http"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cfg.Set(&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "web", Sources: []*api.SourceIntention{
		{Name: "client", Permissions: []*api.IntentionPermission{
			{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/api/", Methods: []string{"GET"}}},
			{Action: api.IntentionActionDeny, HTTP: &api.IntentionHTTPPermission{PathExact: "/admin"}},
			{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/ops/",
				Header: []api.IntentionHTTPHeaderPermission{{Name: "X-Role", Exact: "ops"}}}},
		}},
		{Name: "*", Action: api.IntentionActionDeny},
	}}, nil); err != nil {
		t.Fatal(err)
	}
	l7 := want("allow[client->web:L7x3/9 *->web:deny/8]")
	p := l7.Intentions[0].Permissions
	if p[0].Action != "allow" || p[0].HTTP == nil || p[0].HTTP.PathPrefix != "/api/" || len(p[0].HTTP.Methods) != 1 ||
		p[1].HTTP.PathExact != "/admin" || p[1].Action != "deny" ||
		len(p[2].HTTP.Header) != 1 || p[2].HTTP.Header[0] != (IntentionHeader{Name: "X-Role", Exact: "ops"}) {
		t.Fatalf("L7 permissions %+v", p)
	}

	if _, err := cfg.Delete(api.ServiceIntentions, "web", nil); err != nil { // delete
		t.Fatal(err)
	}
	want("allow[]")

	// A change of another service's intentions emits nothing: the next
	// value is web's own next change.
	n := len(rec.all())
	if _, _, err := cfg.Set(&api.ServiceIntentionsConfigEntry{Kind: api.ServiceIntentions, Name: "db",
		Sources: []*api.SourceIntention{{Name: "x", Action: api.IntentionActionAllow}}}, nil); err != nil {
		t.Fatal(err)
	}
	upsertIntention(t, a, "late", "web", "allow")
	want("allow[late->web:allow/9]")
	if got := len(rec.all()); got != n+1 {
		t.Fatalf("%d values emitted for one change of web's intentions and one of db's", got-n)
	}
}

// TestConnectDefaultDenyAndACLErrors: with a default-deny ACL the
// intentions carry the deny default; a token without service:write on the
// identity gets 403 on the leaf, which is a failed query (status, metrics),
// never an emitted value, and the roots watch beside it is unaffected.
func TestConnectDefaultDenyAndACLErrors(t *testing.T) {
	t.Parallel()
	const mgmt = "5e1b3a2c-0d3e-4c57-9f6a-2b7d8c9e0f11"
	a := consultest.Start(t, consultest.WithACLs(mgmt))
	m, sink := newMetrics(t)
	c := newTestClient(t, a.Addr(), func(c *Config) { c.Token, c.Metrics = mgmt, m })
	rec := startConnect(t, func(ctx context.Context, emit func(Intentions)) error { return c.WatchIntentions(ctx, "web", emit) })
	waitLast(t, rec, "the default-deny policy", waitTimeout, func(in Intentions) bool { return intentionSummary(in) == "deny[]" })

	tok := a.CreateToken(t, "read-only", `service_prefix "" { policy = "read" } node_prefix "" { policy = "read" }`)
	ro := newTestClient(t, a.Addr(), func(c *Config) { c.Token, c.Metrics = tok, m })
	leaves := startConnect(t, func(ctx context.Context, emit func(LeafCert)) error { return ro.WatchLeaf(ctx, "web", emit) })
	roots := startConnect(t, ro.WatchRoots)
	waitFor(t, "a 403 on the leaf", func() bool {
		st := ro.Status()
		return len(st) == 2 && st[0].Connect.Kind == ConnectLeaf && st[0].LastErrorReason == "http_403" && !st[0].Synced
	})
	waitLast(t, roots, "roots", waitTimeout, func(CARoots) bool { return true })
	waitFor(t, "the leaf's 403 counted", func() bool {
		return sink.counter("impulse.discovery.query.errors;service="+LeafEndpoint+"web;reason=http_403") > 0
	})
	if n := len(leaves.all()); n != 0 {
		t.Fatalf("a denied leaf emitted %d values", n)
	}
}

// TestConnectWatchesKeepStateThroughOutage: while the agent is down the
// watches report the failure and emit nothing (the last roots, leaf and
// intentions stay the truth); the restarted dev agent has a new CA, which
// they then deliver.
func TestConnectWatchesKeepStateThroughOutage(t *testing.T) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr())
	roots := startConnect(t, c.WatchRoots)
	leaves := startConnect(t, func(ctx context.Context, emit func(LeafCert)) error { return c.WatchLeaf(ctx, "web", emit) })
	ixns := startConnect(t, func(ctx context.Context, emit func(Intentions)) error { return c.WatchIntentions(ctx, "web", emit) })
	r0 := waitLast(t, roots, "roots", waitTimeout, func(CARoots) bool { return true })
	waitLast(t, leaves, "a leaf", waitTimeout, func(LeafCert) bool { return true })
	waitLast(t, ixns, "intentions", waitTimeout, func(Intentions) bool { return true })

	a.Stop()
	waitFor(t, "three failing watches", func() bool {
		n := 0
		for _, st := range c.Status() {
			if st.LastError != "" && st.Synced {
				n++
			}
		}
		return n == 3
	})
	if len(roots.all()) != 1 || len(leaves.all()) != 1 || len(ixns.all()) != 1 {
		t.Fatalf("failed queries emitted: %d roots, %d leaves, %d intentions", len(roots.all()), len(leaves.all()), len(ixns.all()))
	}
	a.Restart()
	r1 := waitLast(t, roots, "the new agent's CA", waitTimeout, func(r CARoots) bool { return r.ActiveRootID != r0.ActiveRootID })
	waitLast(t, leaves, "a leaf of the new CA", waitTimeout, func(l LeafCert) bool {
		return strings.HasPrefix(l.ServiceURI, "spiffe://"+r1.TrustDomain+"/")
	})
	waitFor(t, "the watches healthy again", func() bool {
		for _, st := range c.Status() {
			if st.LastError != "" {
				return false
			}
		}
		return true
	})
}

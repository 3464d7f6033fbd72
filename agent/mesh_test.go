package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// Inbound service mesh (issue 23, cases M01–M03) against the real Consul
// dev agent, whose Connect CA is one the test owns (mesh_pki_test.go): the
// gateway has connect { service = "web" } and a mesh listener over h1, h2
// and h3 in front of one app.

// meshEnv is a running gateway with a mesh listener, its Consul, the CA,
// and a leaf of service "client" fetched from the agent.
type meshEnv struct {
	consul *consultest.Agent
	ca     *meshCA
	td     string
	r      *running
	client tls.Certificate
}

var meshProtocols = []string{"h1", "h2", "h3"}

// meshConfig is a gateway whose listener "mesh" serves the Connect identity
// web in front of the app at appURL, with Consul at consulAddr.
func meshConfig(consulAddr, appURL string) string {
	return baseConfig + fmt.Sprintf(`
connect {
  service = "web"
}
consul {
  address = %q
  wait    = "2s"
}
listener "mesh" {
  address   = "127.0.0.1:0"
  protocols = ["h1", "h2", "h3"]
  connect   = true
}
upstream "app" {
  route {}
  backend "a" { address = %q }
}
`, consulAddr, appURL)
}

func startMesh(t *testing.T) *meshEnv {
	t.Helper()
	ca := newMeshCA(t)
	consul := consultest.Start(t, consultest.WithConfig(ca.consulConfig(t)))
	consul.RegisterTTL(t, "client-1", "client", "127.0.0.1", 9, nil, nil)
	leaf, _, err := consul.Client().Agent().ConnectCALeaf("client", nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair([]byte(leaf.CertPEM), []byte(leaf.PrivateKeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	roots, _, err := consul.Client().Agent().ConnectCARoots(nil)
	if err != nil {
		t.Fatal(err)
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/xfcc" {
			io.WriteString(w, r.Header.Get("X-Forwarded-Client-Cert"))
			return
		}
		io.WriteString(w, "app")
	}))
	t.Cleanup(app.Close)
	r := start(t, meshConfig(consul.Addr(), app.URL))
	e := &meshEnv{consul: consul, ca: ca, td: roots.TrustDomain, r: r, client: cert}
	waitUntil(t, "the gateway is ready", 15*time.Second, func() bool {
		code, _ := r.control("GET", "/v1/ready", "")
		return code == 200
	})
	return e
}

// waitUntil polls cond every 20 ms until it holds or timeout passes.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// svc is the SPIFFE ID of service name in the cluster's trust domain.
func (e *meshEnv) svc(name string) string {
	return "spiffe://" + e.td + "/ns/default/dc/dc1/svc/" + name
}

// meshClient is an HTTP client of one protocol presenting cert (nil:
// none); it checks the server is service web. close releases it.
func meshClient(proto string, cert *tls.Certificate, keepAlive bool) (c *http.Client, close func()) {
	cfg := &tls.Config{InsecureSkipVerify: true, VerifyConnection: func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || len(cs.PeerCertificates[0].URIs) != 1 ||
			!strings.HasSuffix(cs.PeerCertificates[0].URIs[0].String(), "/svc/web") {
			return errors.New("the server is not service web")
		}
		return nil
	}}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	var rt http.RoundTripper
	switch proto {
	case "h3":
		tr := &http3.Transport{TLSClientConfig: cfg}
		return &http.Client{Transport: tr, Timeout: 5 * time.Second}, func() { tr.Close() }
	case "h2":
		var p http.Protocols
		p.SetHTTP2(true)
		rt = &http.Transport{TLSClientConfig: cfg, Protocols: &p, DisableKeepAlives: !keepAlive}
	default:
		var p http.Protocols
		p.SetHTTP1(true)
		rt = &http.Transport{TLSClientConfig: cfg, Protocols: &p, DisableKeepAlives: !keepAlive}
	}
	tr := rt.(*http.Transport)
	return &http.Client{Transport: rt, Timeout: 5 * time.Second}, tr.CloseIdleConnections
}

// meshGet sends GET path over proto with cert on a fresh connection and
// returns the status, the x-impulse-error field and the body, or the error.
func (e *meshEnv) meshGet(proto string, cert *tls.Certificate, path string) (int, string, string, error) {
	c, done := meshClient(proto, cert, false)
	defer done()
	return get(c, "https://"+e.r.a.ListenerAddrs()["mesh"].String()+path)
}

func get(c *http.Client, u string) (int, string, string, error) {
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("X-Impulse-Error"), string(b), err
}

// metricsText is the control API's /metrics.
func (e *meshEnv) metricsText(t *testing.T) string {
	t.Helper()
	code, body := e.r.control("GET", "/metrics", "")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	return body
}

// TestM01MeshInboundPeers: only a Connect peer with a valid certificate
// gets a request through the mesh listener (the app sees its SPIFFE ID in
// X-Forwarded-Client-Cert), over h1, h2 and h3 (over h3
// the dial may succeed under TLS 1.3: the request is what must fail). The
// refusals are counted by reason in impulse_connect_authorizations, and
// the leaf's expiry is exported.
func TestM01MeshInboundPeers(t *testing.T) {
	e := startMesh(t)
	other := newMeshCA(t)
	past := time.Now().Add(-48 * time.Hour)
	peers := []struct {
		name, reason string
		cert         *tls.Certificate
	}{
		{"no certificate", "no_certificate", nil},
		{"a foreign CA", "untrusted", ptr(other.issue(t, []string{e.svc("client")}, time.Time{}, time.Time{}))},
		{"an expired leaf", "expired", ptr(e.ca.issue(t, []string{e.svc("client")}, past, past.Add(time.Hour)))},
		{"a non-SPIFFE URI", "bad_identity", ptr(e.ca.issue(t, []string{"https://client.example/"}, time.Time{}, time.Time{}))},
		{"two URI SANs", "bad_identity", ptr(e.ca.issue(t, []string{e.svc("client"), e.svc("admin")}, time.Time{}, time.Time{}))},
		{"another trust domain", "trust_domain", ptr(e.ca.issue(t, []string{"spiffe://other.consul/ns/default/dc/dc1/svc/client"}, time.Time{}, time.Time{}))},
	}
	for _, proto := range meshProtocols {
		t.Run(proto, func(t *testing.T) {
			code, _, body, err := e.meshGet(proto, &e.client, "/hello")
			if err != nil || code != 200 || body != "app" {
				t.Fatalf("the client's leaf: %d %q %v", code, body, err)
			}
			// The app learns the peer's identity as Envoy tells it.
			if _, _, xfcc, err := e.meshGet(proto, &e.client, "/xfcc"); err != nil || !strings.Contains(xfcc, ";URI="+e.svc("client")) {
				t.Errorf("X-Forwarded-Client-Cert %q (%v), want URI=%s", xfcc, err, e.svc("client"))
			}
			for _, p := range peers {
				if code, _, body, err := e.meshGet(proto, p.cert, "/hello"); err == nil {
					t.Errorf("%s: a request got through: %d %q", p.name, code, body)
				}
			}
		})
	}
	code, body := e.r.control("GET", "/v1/status", "")
	var status struct{ Connect *connectDoc }
	if err := json.Unmarshal([]byte(body), &status); err != nil || code != 200 {
		t.Fatalf("/v1/status: %d %v", code, err)
	}
	if c := status.Connect; c == nil || c.Service != "web" || c.LeafURI != e.svc("web") || c.TrustDomain != e.td ||
		len(c.Roots) != 1 || c.DefaultPolicy != "allow" || strings.Contains(body, "PRIVATE KEY") {
		t.Errorf("/v1/status connect: %+v", status.Connect)
	}
	waitUntil(t, "the refusals and the leaf expiry are exported", 5*time.Second, func() bool {
		m := e.metricsText(t)
		for _, p := range peers {
			if !strings.Contains(m, `impulse_connect_authorizations{result="`+p.reason+`"`) {
				return false
			}
		}
		return strings.Contains(m, `impulse_connect_authorizations{result="allow",source="client"}`) &&
			strings.Contains(m, `impulse_connect_leaf_expiry_seconds{service="web"}`)
	})
}

func ptr[T any](v T) *T { return &v }

// httpProtocol makes web an http service (service-defaults), which L7
// intentions need.
func (e *meshEnv) httpProtocol(t *testing.T) {
	t.Helper()
	if _, _, err := e.consul.Client().ConfigEntries().Set(&api.ServiceConfigEntry{
		Kind: api.ServiceDefaults, Name: "web", Protocol: "http"}, nil); err != nil {
		t.Fatal(err)
	}
}

// setIntentions writes the service-intentions config entry of web.
func (e *meshEnv) setIntentions(t *testing.T, sources ...*api.SourceIntention) {
	t.Helper()
	if _, _, err := e.consul.Client().ConfigEntries().Set(&api.ServiceIntentionsConfigEntry{
		Kind: api.ServiceIntentions, Name: "web", Sources: sources}, nil); err != nil {
		t.Fatal(err)
	}
}

// TestM02MeshL4IntentionsLive: an L4 deny of client → web refuses new
// connections of client (over h1, h2 and h3) soon after it is written,
// without a reload, while another source stays allowed; an open
// connection gets 403 intention_denied at its next request (intentions
// are decided per request too); allowing again lets client back in.
func TestM02MeshL4IntentionsLive(t *testing.T) {
	e := startMesh(t)
	gen := e.r.a.generation()
	otherPeer := e.ca.issue(t, []string{e.svc("other")}, time.Time{}, time.Time{})
	addr := "https://" + e.r.a.ListenerAddrs()["mesh"].String() + "/hello"
	open, closeOpen := meshClient("h2", &e.client, true)
	defer closeOpen()
	if code, _, _, err := get(open, addr); err != nil || code != 200 {
		t.Fatalf("before: %d %v", code, err)
	}

	e.setIntentions(t, &api.SourceIntention{Name: "client", Action: api.IntentionActionDeny})
	waitUntil(t, "client is refused", 5*time.Second, func() bool {
		_, _, _, err := e.meshGet("h1", &e.client, "/hello")
		return err != nil
	})
	for _, proto := range meshProtocols {
		if code, _, _, err := e.meshGet(proto, &e.client, "/hello"); err == nil {
			t.Errorf("%s: client denied, yet got %d", proto, code)
		}
		if code, _, _, err := e.meshGet(proto, &otherPeer, "/hello"); err != nil || code != 200 {
			t.Errorf("%s: other: %d %v", proto, code, err)
		}
	}
	if code, reason, _, err := get(open, addr); err != nil || code != 403 || reason != "intention_denied" {
		t.Errorf("the open connection: %d %q %v, want 403 intention_denied", code, reason, err)
	}

	e.setIntentions(t, &api.SourceIntention{Name: "client", Action: api.IntentionActionAllow})
	waitUntil(t, "client is allowed again", 5*time.Second, func() bool {
		code, _, _, err := e.meshGet("h3", &e.client, "/hello")
		return err == nil && code == 200
	})
	if g := e.r.a.generation(); g != gen {
		t.Errorf("generation %d → %d: intentions must apply without a reload", gen, g)
	}
	if !strings.Contains(e.metricsText(t), `impulse_connect_authorizations{result="deny",source="client"}`) {
		t.Error("no deny counted for client")
	}
}

// TestM03MeshL7Intentions: a service-intentions entry with permissions for
// client (web's protocol http): GET under /api/ allowed, /admin denied —
// also written //admin, /a/../admin, /api/../admin and /%61dmin, which the
// gateway's normalisation makes /admin — and X-Role: ops required under
// /ops/. Unmatched requests get the default (allow: no ACLs). Over h1, h2
// and h3; a denied request gets 403 intention_denied.
func TestM03MeshL7Intentions(t *testing.T) {
	e := startMesh(t)
	e.httpProtocol(t)
	e.setIntentions(t, &api.SourceIntention{Name: "client", Permissions: []*api.IntentionPermission{
		{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/api/", Methods: []string{"GET"}}},
		{Action: api.IntentionActionDeny, HTTP: &api.IntentionHTTPPermission{PathExact: "/admin"}},
		{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/ops/",
			Header: []api.IntentionHTTPHeaderPermission{{Name: "X-Role", Exact: "ops"}}}},
		{Action: api.IntentionActionDeny, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/ops/"}},
	}})
	waitUntil(t, "the L7 intention applies", 5*time.Second, func() bool {
		code, _, _, _ := e.meshGet("h1", &e.client, "/admin")
		return code == 403
	})
	cases := []struct {
		path string
		code int
	}{
		{"/api/x", 200}, {"/admin", 403}, {"//admin", 403}, {"/a/../admin", 403}, {"/api/../admin", 403},
		{"/%61dmin", 403}, {"/ADMIN", 200}, {"/admin/x", 200}, {"/ops/run", 403}, {"/other", 200},
	}
	for _, proto := range meshProtocols {
		t.Run(proto, func(t *testing.T) {
			for _, c := range cases {
				code, reason, _, err := e.meshGet(proto, &e.client, c.path)
				if err != nil || code != c.code || (c.code == 403) != (reason == "intention_denied") {
					t.Errorf("%s: %d %q %v, want %d", c.path, code, reason, err, c.code)
				}
			}
			c, done := meshClient(proto, &e.client, false)
			defer done()
			req, _ := http.NewRequest("GET", "https://"+e.r.a.ListenerAddrs()["mesh"].String()+"/ops/run", nil)
			req.Header.Set("X-Role", "ops")
			resp, err := c.Do(req)
			if err != nil || resp.StatusCode != 200 {
				t.Errorf("/ops/run with X-Role ops: %v %v", resp, err)
			} else {
				resp.Body.Close()
			}
		})
	}
}

// TestMeshConsulDownAtStart: with Consul unreachable the gateway starts,
// its mesh listener refuses every handshake, and /v1/ready says why.
func TestMeshConsulDownAtStart(t *testing.T) {
	ca := newMeshCA(t)
	app := backend(t, "app")
	r := start(t, meshConfig("127.0.0.1:1", app.URL))
	waitUntil(t, "a watch has failed", 10*time.Second, func() bool {
		code, reasons := readyReasons(t, r)
		return code == 503 && strings.Contains(strings.Join(reasons, "\n"), "connect web: no leaf certificate yet (last error:")
	})
	cert := ca.issue(t, []string{"spiffe://x.consul/ns/default/dc/dc1/svc/client"}, time.Time{}, time.Time{})
	for _, proto := range meshProtocols {
		c, done := meshClient(proto, &cert, false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+r.a.ListenerAddrs()["mesh"].String()+"/", nil)
		if resp, err := c.Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("%s: served %d without a leaf", proto, resp.StatusCode)
		}
		cancel()
		done()
	}
}

// TestMeshConsulOutageKeepsServing: once the gateway has its leaf, roots
// and intentions, Consul going away changes nothing for mesh peers: the
// last leaf is served (it has not expired) and /v1/ready stays 200,
// degraded with the reason.
func TestMeshConsulOutageKeepsServing(t *testing.T) {
	e := startMesh(t)
	e.consul.Stop()
	waitUntil(t, "readiness degraded by the failing leaf watch", 15*time.Second, func() bool {
		code, body := e.r.control("GET", "/v1/ready", "")
		return code == 200 && strings.Contains(body, "connect web: serving the last leaf certificate")
	})
	for _, proto := range meshProtocols {
		if code, _, body, err := e.meshGet(proto, &e.client, "/hello"); err != nil || code != 200 || body != "app" {
			t.Errorf("%s with Consul down: %d %q %v", proto, code, body, err)
		}
	}
}

// TestMeshReload: a reload with the same connect block keeps the mesh
// listener serving (and enforcing: a peer without a certificate is still
// refused); one that changes the connect block is refused with a
// diagnostic at the block, and the running configuration stays.
func TestMeshReload(t *testing.T) {
	e := startMesh(t)
	if _, diags, err := e.r.a.Reload(); err != nil {
		t.Fatalf("same configuration: %v %v", err, diags)
	}
	if code, _, _, err := e.meshGet("h2", &e.client, "/hello"); err != nil || code != 200 {
		t.Fatalf("after a reload: %d %v", code, err)
	}
	if _, _, _, err := e.meshGet("h2", nil, "/hello"); err == nil {
		t.Fatal("after a reload: a peer without a certificate got through")
	}
	b, err := os.ReadFile(e.r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.r.cfg, []byte(strings.Replace(string(b), `service = "web"`, `service = "api"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, diags, err := e.r.a.Reload()
	if err == nil || len(diags) == 0 || !strings.Contains(diags[0], "gateway.hcl:") || !strings.Contains(diags[0], "needs a restart") {
		t.Fatalf("changed connect block: %v %v", err, diags)
	}
	if code, _, _, err := e.meshGet("h3", &e.client, "/hello"); err != nil || code != 200 {
		t.Fatalf("after a refused reload: %d %v", code, err)
	}
}

// TestMeshPriorKnowledgeH2: a TLS connection that negotiated no ALPN and
// starts with the HTTP/2 preface (Envoy's upstream clusters speak HTTP/2
// by prior knowledge) is served as HTTP/2, with the peer's identity: the
// request is authorized as client's (an L7 deny applies to it too), and
// several requests share the connection.
func TestMeshPriorKnowledgeH2(t *testing.T) {
	e := startMesh(t)
	e.httpProtocol(t)
	e.setIntentions(t, &api.SourceIntention{Name: "client", Permissions: []*api.IntentionPermission{
		{Action: api.IntentionActionDeny, HTTP: &api.IntentionHTTPPermission{PathExact: "/admin"}}}})
	dials := 0
	tr := &http2.Transport{DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
		dials++
		d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{e.client}}} // no ALPN
		return d.DialContext(ctx, network, addr)
	}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	base := "https://" + e.r.a.ListenerAddrs()["mesh"].String()
	waitUntil(t, "the L7 intention applies", 5*time.Second, func() bool {
		code, _, _, err := get(c, base+"//admin")
		return err == nil && code == 403
	})
	for range 3 {
		resp, err := c.Get(base + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "app" || resp.ProtoMajor != 2 {
			t.Fatalf("%s %d %q", resp.Proto, resp.StatusCode, b)
		}
	}
	if code, reason, _, err := get(c, base+"/admin"); err != nil || code != 403 || reason != "intention_denied" {
		t.Errorf("/admin: %d %q %v", code, reason, err)
	}
	if dials != 1 {
		t.Errorf("%d connections, want 1", dials)
	}
	// The shutdown sends the open connection GOAWAY and does not wait
	// for drain_timeout.
	began := time.Now()
	if err := e.r.stop(); err != nil {
		t.Errorf("shutdown with a prior-knowledge connection open: %v", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("shutdown took %v with an idle prior-knowledge connection open", d)
	}
}

// TestMeshCARotation: a CA rotation (PUT /v1/connect/ca/configuration with
// a new root) makes Consul re-issue web's leaf under the new root; new
// handshakes get it without a restart, an open connection keeps working,
// and the client's leaf from the old root is still trusted (the old root
// stays among the roots until its leaves expire).
func TestMeshCARotation(t *testing.T) {
	e := startMesh(t)
	addr := "https://" + e.r.a.ListenerAddrs()["mesh"].String()
	open, closeOpen := meshClient("h2", &e.client, true)
	defer closeOpen()
	if code, _, _, err := get(open, addr+"/hello"); err != nil || code != 200 {
		t.Fatalf("before: %d %v", code, err)
	}
	next := newNamedMeshCA(t, "impulse test Connect CA 2")
	key, root := next.pems(t)
	if _, err := e.consul.Client().Connect().CASetConfig(&api.CAConfig{Provider: "consul",
		Config: map[string]any{"PrivateKey": key, "RootCert": root}}, nil); err != nil {
		t.Fatal(err)
	}
	issuer := func() string {
		var got string
		cfg := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{e.client},
			VerifyConnection: func(cs tls.ConnectionState) error {
				got = cs.PeerCertificates[0].Issuer.CommonName
				return nil
			}}
		c, err := tls.Dial("tcp", e.r.a.ListenerAddrs()["mesh"].String(), cfg)
		if err == nil {
			c.Close()
		}
		return got
	}
	// Consul re-issues leaves after a rotation with a random delay of up
	// to about 30 s (it spreads the signing load).
	rotated := time.Now()
	waitUntil(t, "the leaf under the new root is served", time.Minute, func() bool {
		return issuer() == "impulse test Connect CA 2"
	})
	t.Logf("new leaf served %v after the rotation", time.Since(rotated).Round(time.Second))
	if code, _, _, err := get(open, addr+"/hello"); err != nil || code != 200 {
		t.Errorf("the connection opened before the rotation: %d %v", code, err)
	}
	for _, proto := range meshProtocols {
		if code, _, _, err := e.meshGet(proto, &e.client, "/hello"); err != nil || code != 200 {
			t.Errorf("%s: the client's leaf from the old root: %d %v", proto, code, err)
		}
	}
}

package agent

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// meshTokenRules is the minimal ACL policy of a gateway whose Connect
// identity is web (README "Service mesh"): service:write on web for its
// leaf certificate and intentions:read on it; the CA roots need no token.
const meshTokenRules = `service "web" {
  policy     = "write"
  intentions = "read"
}`

// TestM03MeshDefaultDenyACL: with ACLs on and default deny, a gateway
// holding the minimal token becomes ready; a source without an intention
// is refused at the handshake (Consul's default policy, from
// X-Consul-Default-ACL-Policy); an L7 intention's unmatched requests get
// that default too (403 intention_denied), its allowed ones go through.
// A token without service:write on web gets no leaf: /v1/ready says so
// and the mesh listener refuses every handshake.
func TestM03MeshDefaultDenyACL(t *testing.T) {
	const mgmt = "6c7c4a54-0b3c-4e0d-9a62-7a1b5f1e2d33"
	consul := consultest.Start(t, consultest.WithACLs(mgmt))
	leaf, _, err := consul.Client().Agent().ConnectCALeaf("client", nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair([]byte(leaf.CertPEM), []byte(leaf.PrivateKeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	app := backend(t, "app")
	withToken := func(token string) string {
		return strings.Replace(meshConfig(consul.Addr(), app.URL), `wait    = "2s"`, fmt.Sprintf("wait = \"2s\"\n  token = %q", token), 1)
	}
	r := start(t, withToken(consul.CreateToken(t, "impulse-mesh", meshTokenRules)))
	waitUntil(t, "the gateway is ready with the minimal token", 15*time.Second, func() bool {
		code, _ := r.control("GET", "/v1/ready", "")
		return code == 200
	})
	e := &meshEnv{consul: consul, r: r, client: cert}
	for _, proto := range meshProtocols {
		if code, _, _, err := e.meshGet(proto, &e.client, "/api/x"); err == nil {
			t.Errorf("%s: no intention under default deny, yet %d", proto, code)
		}
	}
	e.httpProtocol(t)
	e.setIntentions(t, &api.SourceIntention{Name: "client", Permissions: []*api.IntentionPermission{
		{Action: api.IntentionActionAllow, HTTP: &api.IntentionHTTPPermission{PathPrefix: "/api/"}},
		{Action: api.IntentionActionDeny, HTTP: &api.IntentionHTTPPermission{PathExact: "/admin"}},
	}})
	waitUntil(t, "the L7 intention applies", 5*time.Second, func() bool {
		code, _, _, err := e.meshGet("h2", &e.client, "/api/x")
		return err == nil && code == 200
	})
	for _, proto := range meshProtocols {
		for path, want := range map[string]int{"/api/x": 200, "//api/x": 200, "/admin": 403, "/other": 403, "/api/../other": 403} {
			code, reason, _, err := e.meshGet(proto, &e.client, path)
			if err != nil || code != want || want == 403 && reason != "intention_denied" {
				t.Errorf("%s %s: %d %q %v, want %d", proto, path, code, reason, err, want)
			}
		}
	}

	weak := start(t, withToken(consul.CreateToken(t, "no-leaf", `service "web" {
  policy     = "read"
  intentions = "read"
}`)))
	waitUntil(t, "readiness says the leaf is denied", 15*time.Second, func() bool {
		code, reasons := readyReasons(t, weak)
		return code == 503 && strings.Contains(strings.Join(reasons, "\n"), "connect web: no leaf certificate yet (last error:")
	})
	we := &meshEnv{consul: consul, r: weak}
	for _, proto := range meshProtocols {
		if code, _, _, err := we.meshGet(proto, &cert, "/api/x"); err == nil {
			t.Errorf("%s: served %d without a leaf", proto, code)
		}
	}
}

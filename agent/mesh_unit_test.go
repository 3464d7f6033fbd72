package agent

import (
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/mesh"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// TestMeshIntentionProblemsLoggedOnce: an intention the gateway cannot
// enforce (a regex RE2 refuses) is logged when it first arrives, not again
// while the set of problems is unchanged, and again once it changes.
func TestMeshIntentionProblemsLoggedOnce(t *testing.T) {
	logs := &syncBuffer{}
	m := newMeshIdentity(&hcl.Connect{Service: "web"}, hclog.New(&hclog.LoggerOptions{Output: logs}))
	bad := func(re string) discovery.Intentions {
		return discovery.Intentions{Service: "web", DefaultPolicy: discovery.PolicyAllow, Intentions: []discovery.Intention{{
			SourceName: "client", DestinationName: "web", Precedence: 9,
			Permissions: []discovery.IntentionPermission{{Action: "allow", HTTP: &discovery.IntentionHTTP{PathRegex: re}}},
		}}}
	}
	count := func() int { return strings.Count(logs.String(), "intention denies: it cannot be enforced") }
	m.setIntentions(bad("(?<=x)"))
	m.setIntentions(bad("(?<=x)"))
	if n := count(); n != 1 {
		t.Fatalf("after the same problem twice: logged %d times, want 1\n%s", n, logs)
	}
	m.setIntentions(bad("(?!y)"))
	if n := count(); n != 2 {
		t.Fatalf("after a new problem: logged %d times, want 2\n%s", n, logs)
	}
	m.setIntentions(discovery.Intentions{Service: "web", DefaultPolicy: discovery.PolicyAllow})
	m.setIntentions(bad("(?!y)"))
	if n := count(); n != 3 {
		t.Fatalf("a problem back after a clean set: logged %d times, want 3\n%s", n, logs)
	}
}

// TestMeshUpstreamsKeepOutbound: a Connect upstream gets the identity's
// Outbound for its service, protocol and datacenter, the same value on
// every conversion (a reload that changes nothing keeps its backends,
// gateway sameTransport), and other upstreams get none.
func TestMeshUpstreamsKeepOutbound(t *testing.T) {
	m := newMeshIdentity(&hcl.Connect{Service: "web"}, hclog.NewNullLogger())
	cfg := &hcl.Config{Upstreams: []hcl.Upstream{
		{Name: "db", Consul: &hcl.UpstreamConsul{Service: "db", Connect: true, Protocol: hcl.ConnectProtocolGRPC, Datacenter: "dc2"}},
		{Name: "plain", Consul: &hcl.UpstreamConsul{Service: "plain", Scheme: "https"}},
	}}
	convert := func() gateway.Config {
		gc := gateway.Config{Upstreams: []gateway.UpstreamConfig{{Config: upstream.Config{Name: "db"}}, {Config: upstream.Config{Name: "plain"}}}}
		meshUpstreams(&gc, cfg, m)
		return gc
	}
	a, b := convert(), convert()
	o, ok := a.Upstreams[0].Handshaker.(*mesh.Outbound)
	if !ok || a.Upstreams[0].Handshaker != b.Upstreams[0].Handshaker {
		t.Fatalf("db's handshaker %v, then %v: want one *mesh.Outbound", a.Upstreams[0].Handshaker, b.Upstreams[0].Handshaker)
	}
	if got := o.Target(); got.Service != "db" || got.Datacenter != "dc2" {
		t.Errorf("target %+v", got)
	}
	if p := o.ClientTLS().NextProtos; len(p) != 1 || p[0] != "h2" {
		t.Errorf("grpc offers ALPN %v, want [h2]", p)
	}
	if a.Upstreams[1].Handshaker != nil {
		t.Error("a plain Consul upstream got a handshaker")
	}
	meshUpstreams(&gateway.Config{}, cfg, nil) // no identity: nothing to do
}

package agent

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// TestReloadCarriesStalenessClock: reloads that change the consul block while
// Consul is unreachable make new watches; each takes the staleness clock of
// the one it replaces, so /v1/ready turns "degraded" max_staleness after the
// last success (here: after the first watch started), however many reloads
// came in between.
func TestReloadCarriesStalenessClock(t *testing.T) {
	gw, err := gateway.New(gateway.Config{Upstreams: []gateway.UpstreamConfig{
		{Config: upstreamCfg("web", true), Routes: []gateway.RouteConfig{{PathPrefix: "/"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Shutdown(t.Context())
	d := newDiscoverySet(hclog.NewNullLogger(), nil, gw, nil)
	defer d.stop()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close() // nothing listens: every query fails
	cfg := func(wait time.Duration) *hcl.Config {
		return &hcl.Config{
			Consul: &hcl.Consul{Address: down, Scheme: "http", Wait: wait, ResyncGrace: 10 * time.Second},
			Upstreams: []hcl.Upstream{{Name: "web",
				Consul: &hcl.UpstreamConsul{Service: "web", Health: "passing", Scheme: "http"}}},
		}
	}
	since := func() time.Time {
		d.mu.Lock()
		defer d.mu.Unlock()
		if len(d.watches) != 1 {
			t.Fatalf("%d watches", len(d.watches))
		}
		for _, w := range d.watches {
			return w.since
		}
		return time.Time{}
	}
	if err := d.apply(cfg(time.Second), false); err != nil {
		t.Fatal(err)
	}
	first := since()
	for _, wait := range []time.Duration{2 * time.Second, 3 * time.Second} {
		if err := d.apply(cfg(wait), false); err != nil {
			t.Fatal(err)
		}
		if got := since(); !got.Equal(first) {
			t.Fatalf("after a reload to wait %s the staleness clock starts at %s, want %s", wait, got, first)
		}
	}
}

package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// TestFeedOutageIsOneReadinessLine: when Consul goes away, every watch
// following the change feed goes stale at once; /v1/ready says so in one
// degraded line naming the feed and counting the services, not a line per
// service (thousands at scale).
func TestFeedOutageIsOneReadinessLine(t *testing.T) {
	const services = 8
	consul := consultest.Start(t)
	var ups []gateway.UpstreamConfig
	var hups []hcl.Upstream
	for i := range services {
		name := fmt.Sprintf("svc%d", i)
		consul.RegisterTTL(t, name+"-0", name, "127.0.0.1", 20000+i, nil, nil)
		ups = append(ups, gateway.UpstreamConfig{Config: upstreamCfg(name, true),
			Routes: []gateway.RouteConfig{{Host: name, PathPrefix: "/"}}})
		hups = append(hups, hcl.Upstream{Name: name,
			Consul: &hcl.UpstreamConsul{Service: name, Health: hcl.DefaultHealth, Scheme: "http"}})
	}
	gw, err := gateway.New(gateway.Config{Upstreams: ups})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Shutdown(t.Context())
	d := newDiscoverySet(hclog.NewNullLogger(), nil, gw, nil)
	defer d.stop()
	cfg := &hcl.Config{Consul: &hcl.Consul{Address: consul.Addr(), Scheme: "http", Wait: 2 * time.Second}, Upstreams: hups}
	if err := d.apply(cfg, false); err != nil {
		t.Fatal(err)
	}
	const maxStale = 500 * time.Millisecond
	waitFor(t, 20*time.Second, "every watch synced", func() bool {
		notReady, degraded := d.readiness(maxStale)
		return len(notReady) == 0 && len(degraded) == 0 && len(gw.Backends()) == services
	})

	consul.Stop()
	var degraded []string
	waitFor(t, 20*time.Second, "every service in the degraded line", func() bool {
		var notReady []string
		notReady, degraded = d.readiness(maxStale)
		if len(notReady) > 0 || len(degraded) > 1 {
			t.Fatalf("readiness: not ready %q, degraded %q; want one degraded line", notReady, degraded)
		}
		return len(degraded) == 1 && strings.Contains(degraded[0], "of 8 services")
	})
	for _, want := range []string{"consul change feed: no successful query for", "svc0, svc1, svc2, svc3, svc4 and 3 more", "last error: change feed:"} {
		if !strings.Contains(degraded[0], want) {
			t.Errorf("degraded %q lacks %q", degraded[0], want)
		}
	}
}

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// TestB02ConsulRestartUnderLoad: a Consul agent stopped for 5 s under steady
// HTTP/3 load and started again (a dev agent comes back with an empty,
// low-index state and the services re-registered from its configuration)
// causes zero failed client requests: errors never shrink the instance set,
// and the watch resumes after a reset index.
func TestB02ConsulRestartUnderLoad(t *testing.T) {
	a1, a2 := newHTTP1Backend(t, "b02-a"), newHTTP1Backend(t, "b02-b")
	// Declared in the agent's configuration, like a real node's service
	// definitions: they are back as soon as the agent is.
	services := fmt.Sprintf(`
services = [
  { id = "b02-a", name = "web", address = "127.0.0.1", port = %d, meta = { impulse-scheme = "http" } },
  { id = "b02-b", name = "web", address = "127.0.0.1", port = %d, meta = { impulse-scheme = "http" } },
]
`, a1.Port, a2.Port)
	c := consultest.Start(t, consultest.WithConfig(services))
	a := startAgent(t, baseHCL()+consulUpstreamHCL(c.Addr(), "web", "", ""))
	client, _ := newH3Client(t)
	waitFor(t, 10*time.Second, "traffic on both instances", func() bool {
		mustGet(t, client, a.URL("/"))
		return a1.Hits() > 0 && a2.Hits() > 0
	})
	l := startLoad(t, client, a.URL("/"), 2)
	waitFor(t, 10*time.Second, "load before the outage", func() bool { return l.ok.Load() > 100 })
	c.Stop()
	time.Sleep(5 * time.Second) // the outage the case prescribes
	c.Restart()
	waitFor(t, 30*time.Second, "the watch to resume", func() bool {
		return len(a.logs.all("consul query failed; keeping the last known instances")) > 0 &&
			fmt.Sprint(a.readyOK()) == "true"
	})
	before1, before2 := a1.Hits(), a2.Hits()
	waitFor(t, 10*time.Second, "traffic on both instances after the restart", func() bool {
		return a1.Hits() > before1+10 && a2.Hits() > before2+10
	})
	l.Stop()
	l.check(t)
	t.Logf("%d requests during the outage test, 0 failed", l.ok.Load())
}

// TestB02ReloadDuringOutageKeepsLastSet: a reload that changes the consul
// block while Consul is down makes a new client and new watches. They carry
// the old watches' state: readiness stays "ok" (the staleness clock keeps the
// old watch's last success), and when Consul comes back empty (a restarted
// dev agent, services not yet registered again) the new watch holds that
// answer like the old one would have: zero failed requests throughout.
func TestB02ReloadDuringOutageKeepsLastSet(t *testing.T) {
	a1, a2 := newHTTP1Backend(t, "b02r-a"), newHTTP1Backend(t, "b02r-b")
	c := consultest.Start(t)
	register := func() {
		c.RegisterTTL(t, "b02r-a", "web", "127.0.0.1", a1.Port, nil, map[string]string{"impulse-scheme": "http"})
		c.RegisterTTL(t, "b02r-b", "web", "127.0.0.1", a2.Port, nil, map[string]string{"impulse-scheme": "http"})
	}
	register()
	cfg := baseHCL() + consulUpstreamHCL(c.Addr(), "web", "", "")
	a := startAgent(t, cfg)
	client, _ := newH3Client(t)
	waitFor(t, 10*time.Second, "traffic on both instances", func() bool {
		mustGet(t, client, a.URL("/"))
		return a1.Hits() > 0 && a2.Hits() > 0
	})
	l := startLoad(t, client, a.URL("/"), 2)
	c.Stop()
	a.waitLog(10*time.Second, "consul query failed; keeping the last known instances", nil)

	changed := strings.Replace(cfg, `wait    = "5s"`, `wait    = "6s"`, 1)
	if changed == cfg {
		t.Fatal("the consul block did not change")
	}
	if err := os.WriteFile(a.ConfigPath, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := a.control("POST", "/v1/reload", nil); code != http.StatusOK {
		t.Fatalf("POST /v1/reload: %d %s", code, body)
	}
	if code, r := a.readyStatus(); code != http.StatusOK || r.Status != "ok" {
		t.Fatalf("/v1/ready after a reload during the outage: %d %+v", code, r)
	}

	c.Restart()
	a.waitLog(20*time.Second, "consul's answer right after an outage or index reset lacks instances it had; keeping them during the resync grace", nil)
	register()
	before1, before2 := a1.Hits(), a2.Hits()
	waitFor(t, 10*time.Second, "traffic on both instances after the restart", func() bool {
		return a1.Hits() > before1+10 && a2.Hits() > before2+10
	})
	a.waitLog(10*time.Second, "consul reports the instances kept again; resync hold released", nil)
	l.Stop()
	l.check(t)
	t.Logf("%d requests, 0 failed", l.ok.Load())
}

// TestReloadAddingUpstreamDuringOutageDegrades: once the gateway was ready, a
// reload that adds an upstream Consul cannot answer for (it is down) leaves the
// gateway in rotation: /v1/ready is 200 "degraded" naming the upstream, which
// answers 503 discovery_pending, while the others keep serving. Failing
// readiness instead would take a whole fleet out when a config push meets a
// Consul outage.
func TestReloadAddingUpstreamDuringOutageDegrades(t *testing.T) {
	web := newHTTP1Backend(t, "rd-web")
	c := consultest.Start(t)
	c.RegisterTTL(t, "rd-web", "web", "127.0.0.1", web.Port, nil, map[string]string{"impulse-scheme": "http"})
	cfg := baseHCL() + consulUpstreamHCL(c.Addr(), "web", "", "")
	a := startAgent(t, cfg)
	client, _ := newH3Client(t)
	waitFor(t, 10*time.Second, "ready", a.readyOK)
	c.Stop()
	a.waitLog(10*time.Second, "consul query failed; keeping the last known instances", nil)

	added := cfg + `
upstream "api" {
  route {
    path_prefix = "/api"
  }
  consul {
    service = "api"
    scheme  = "http"
  }
}
`
	if err := os.WriteFile(a.ConfigPath, []byte(added), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := a.control("POST", "/v1/reload", nil); code != http.StatusOK {
		t.Fatalf("POST /v1/reload: %d %s", code, body)
	}
	code, r := a.readyStatus()
	if code != http.StatusOK || r.Status != "degraded" || !strings.Contains(strings.Join(r.Degraded, "\n"), "api") {
		t.Fatalf("/v1/ready: %d %+v, want 200 degraded naming api", code, r)
	}
	if res := mustGet(t, client, a.URL("/api/x")); res.Status != http.StatusServiceUnavailable || res.Header.Get("X-Impulse-Error") != "discovery_pending" {
		t.Fatalf("GET /api/x: %d %q", res.Status, res.Header.Get("X-Impulse-Error"))
	}
	if res := mustGet(t, client, a.URL("/")); res.Status != http.StatusOK {
		t.Fatalf("GET /: %d", res.Status)
	}
}

func (a *agentProc) readyOK() bool {
	code, r := a.readyStatus()
	return code == 200 && r.Status == "ok"
}

// TestB03ZeroPassingInstancesIs503 (real Consul): /sales → sales-ui,
// /sales/api → sales-api; every sales-api instance critical → GET
// /sales/api/orders answers 503 no_healthy_backend, sales-ui receives
// nothing, and the request metric counts it. Routes come from configuration,
// not from instance health.
func TestB03ZeroPassingInstancesIs503(t *testing.T) {
	c := consultest.Start(t)
	ui, api1 := newHTTP1Backend(t, "sales-ui"), newHTTP1Backend(t, "sales-api-1")
	c.RegisterTTL(t, "sales-ui-1", "sales-ui", "127.0.0.1", ui.Port, nil, nil)
	check := c.RegisterTTL(t, "sales-api-1", "sales-api", "127.0.0.1", api1.Port, nil, nil)
	cfg := baseHCL() + fmt.Sprintf(`
consul {
  address = %q
  wait    = "5s"
}
upstream "sales-ui" {
  route {
    path_prefix = "/sales"
  }
  consul {
    service = "sales-ui"
    scheme  = "http"
  }
}
upstream "sales-api" {
  route {
    path_prefix = "/sales/api"
  }
  consul {
    service = "sales-api"
    scheme  = "http"
  }
}
`, c.Addr())
	a := startAgent(t, cfg)
	client, _ := newH3Client(t)
	waitFor(t, 10*time.Second, "sales-api traffic", func() bool {
		r, err := get(client, a.URL("/sales/api/orders"))
		return err == nil && r.Status == 200 && api1.Hits() > 0
	})
	c.SetCheck(t, check, "critical")
	waitFor(t, 5*time.Second, "503 once sales-api has no passing instance", func() bool {
		r, err := get(client, a.URL("/sales/api/orders"))
		return err == nil && r.Status == 503 && r.Header.Get("X-Impulse-Error") == "no_healthy_backend"
	})
	uiBefore := ui.Hits()
	for i := 0; i < 10; i++ {
		if r := mustGet(t, client, a.URL("/sales/api/orders")); r.Status != 503 {
			t.Fatalf("request %d: %d", i, r.Status)
		}
	}
	if ui.Hits() != uiBefore {
		t.Fatalf("sales-ui received %d requests meant for sales-api", ui.Hits()-uiBefore)
	}
	_, m := a.control("GET", "/metrics", nil)
	if !strings.Contains(string(m), `code="5xx",listener="public",protocol="h3",reason="no_healthy_backend",upstream="sales-api"`) {
		t.Errorf("no no_healthy_backend count for sales-api:\n%s", grepLines(string(m), "impulse_requests"))
	}
}

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// TestB07ACLDeniedKeepsRoutes: with a token that may read the service,
// traffic flows; a reload with a token lacking service:read is answered by
// Consul with an ACL error, which never empties the upstream: the last known
// instances keep serving, /v1/ready reports discovery degraded, and the
// error is counted with its status. A cold start with the denied token
// answers 503 discovery_pending with the ACL error in /v1/ready.
func TestB07ACLDeniedKeepsRoutes(t *testing.T) {
	const mgmt = "6a1c2b3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	c := consultest.Start(t, consultest.WithACLs(mgmt))
	good := c.CreateToken(t, "web-read", "service \"web\" { policy = \"read\" }\nnode_prefix \"\" { policy = \"read\" }")
	denied := c.CreateToken(t, "nodes-only", "node_prefix \"\" { policy = \"read\" }")
	be := newHTTP1Backend(t, "acl-1")
	c.RegisterTTL(t, "acl-1", "web", "127.0.0.1", be.Port, nil, map[string]string{"impulse-scheme": "http"})

	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte(good), 0o600)
	cfg := baseHCL() + consulUpstreamHCL(c.Addr(), "web", "", "")
	cfg = strings.Replace(cfg, `wait    = "5s"`, fmt.Sprintf("wait    = \"1s\"\n  token_file = %q", tokenFile), 1)
	a := startAgent(t, cfg)
	client, _ := newH3Client(t)
	waitFor(t, 10*time.Second, "traffic with the good token", func() bool {
		r, err := get(client, a.URL("/"))
		return err == nil && r.Status == 200
	})

	os.WriteFile(tokenFile, []byte(denied), 0o600)
	if code, body := a.control("POST", "/v1/reload", nil); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	waitFor(t, 10*time.Second, "/v1/ready to report the ACL denial", func() bool {
		code, r := a.readyStatus()
		return code == 200 && r.Status == "degraded" && len(r.Degraded) == 1 && strings.Contains(r.Degraded[0], "ACL denied")
	})
	for i := 0; i < 20; i++ {
		if r := mustGet(t, client, a.URL("/")); r.Status != 200 {
			t.Fatalf("request %d after the ACL denial: %d %s", i, r.Status, r.Header.Get("X-Impulse-Error"))
		}
	}
	_, metrics := a.control("GET", "/metrics", nil)
	if !strings.Contains(string(metrics), `impulse_discovery_query_errors{reason="acl_filtered",service="web"}`) {
		t.Errorf("no acl_filtered error metric:\n%s", grepLines(string(metrics), "discovery_query_errors"))
	}
	if strings.Contains(a.Logs(), good) || strings.Contains(a.Logs(), denied) {
		t.Error("a token appeared in the logs")
	}

	// Cold start with the denied token: explicit 503, never a silent 404.
	cold := startAgent(t, cfg)
	waitFor(t, 10*time.Second, "cold start to report the denial", func() bool {
		code, r := cold.readyStatus()
		return code == 503 && strings.Contains(strings.Join(r.Reasons, "\n"), "filtered by ACLs")
	})
	if r := mustGet(t, client, cold.URL("/")); r.Status != 503 || r.Header.Get("X-Impulse-Error") != "discovery_pending" {
		t.Fatalf("cold start with a denied token: %d %q", r.Status, r.Header.Get("X-Impulse-Error"))
	}
}

// TestStaleDiscoveryDegradesReadiness: when Consul stops answering for
// longer than consul.max_staleness, /v1/ready reports degraded (still 200:
// traffic keeps flowing on the last known instances) and the last-success
// age is exported; once Consul answers again the status returns to ok.
func TestStaleDiscoveryDegradesReadiness(t *testing.T) {
	c := consultest.Start(t)
	be := newHTTP1Backend(t, "stale-1")
	c.RegisterTTL(t, "stale-1", "web", "127.0.0.1", be.Port, nil, map[string]string{"impulse-scheme": "http"})
	cfg := strings.Replace(baseHCL()+consulUpstreamHCL(c.Addr(), "web", "", ""), `wait    = "5s"`, "wait    = \"1s\"\n  max_staleness = \"7s\"", 1)
	a := startAgent(t, cfg)
	client, _ := newH3Client(t)
	waitFor(t, 10*time.Second, "traffic", func() bool {
		r, err := get(client, a.URL("/"))
		return err == nil && r.Status == 200
	})
	c.Stop()
	waitFor(t, 20*time.Second, "degraded readiness", func() bool {
		code, r := a.readyStatus()
		return code == 200 && r.Status == "degraded" && len(r.Degraded) == 1 && strings.Contains(r.Degraded[0], "no successful query")
	})
	if r := mustGet(t, client, a.URL("/")); r.Status != 200 {
		t.Fatalf("traffic while Consul is down: %d", r.Status)
	}
	_, metrics := a.control("GET", "/metrics", nil)
	if !strings.Contains(string(metrics), `impulse_discovery_last_success_age{service="web"}`) {
		t.Errorf("no last-success age metric:\n%s", grepLines(string(metrics), "last_success"))
	}
	c.Restart()
	c.RegisterTTL(t, "stale-1", "web", "127.0.0.1", be.Port, nil, map[string]string{"impulse-scheme": "http"})
	waitFor(t, 30*time.Second, "readiness back to ok", func() bool {
		code, r := a.readyStatus()
		return code == 200 && r.Status == "ok"
	})
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSelfRegistration: consul.register puts the gateway in the catalog with
// a passing readiness check, registers again after a Consul agent restart
// (which forgets it), and on SIGTERM leaves the catalog while a slow
// response is still draining.
func TestSelfRegistration(t *testing.T) {
	c := consultest.Start(t)
	be := newHTTP1Backend(t, "reg-1")
	cfg := baseHCL() + fmt.Sprintf(`
consul {
  address = %q
  wait    = "2s"
  register {
    service = "edge"
    tags    = ["h3"]
  }
}
`, c.Addr()) + staticUpstreamHCL("web", "/", "", be)
	a := startAgent(t, cfg)
	_, port, _ := strings.Cut(a.ListenAddr, ":")
	edge := func() []*api.ServiceEntry {
		entries, _, err := c.Client().Health().Service("edge", "", true, nil)
		if err != nil {
			return nil
		}
		return entries
	}
	waitFor(t, 15*time.Second, "a passing edge instance", func() bool {
		e := edge()
		return len(e) == 1 && fmt.Sprint(e[0].Service.Port) == port && len(e[0].Service.Tags) == 1
	})

	c.Restart()
	waitFor(t, 30*time.Second, "registration again after the Consul restart", func() bool { return len(edge()) == 1 })

	client, _ := newH3Client(t)
	done := make(chan result, 1)
	go func() {
		r, _ := get(client, a.URL("/slow?first=1024&total=2048&sleep=3s"))
		done <- r
	}()
	waitFor(t, 10*time.Second, "the slow request to start", func() bool { return be.Hits() > 0 })
	a.Signal(syscall.SIGTERM)
	waitFor(t, 5*time.Second, "deregistration while draining", func() bool {
		entries, _, err := c.Client().Health().Service("edge", "", false, nil)
		return err == nil && len(entries) == 0
	})
	select {
	case r := <-done:
		t.Fatalf("slow response finished (%d) before deregistration was observed", r.Status)
	default:
	}
	if r := <-done; r.Status != 200 || len(r.Body) != 2048 {
		t.Fatalf("slow response after SIGTERM: %d, %d bytes", r.Status, len(r.Body))
	}
	if code := a.WaitExit(10 * time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

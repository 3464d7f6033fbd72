package e2e

import (
	"fmt"
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

func (a *agentProc) readyOK() bool {
	code, r := a.readyStatus()
	return code == 200 && r.Status == "ok"
}

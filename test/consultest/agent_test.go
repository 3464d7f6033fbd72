package consultest

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// waitFor polls cond every 20 ms until it holds or 15 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func healthOf(t *testing.T, a *Agent, service string) (api.HealthChecks, bool) {
	t.Helper()
	entries, _, err := a.Client().Health().Service(service, "", false, nil)
	if err != nil || len(entries) != 1 {
		return nil, false
	}
	return entries[0].Checks, true
}

func TestAgentLifecycle(t *testing.T) {
	start := time.Now()
	a := Start(t)
	t.Logf("started in %s at %s", time.Since(start), a.Addr())

	check := a.RegisterTTL(t, "web-1", "web", "10.0.0.1", 8080, []string{"v1"}, map[string]string{"k": "v"})
	waitFor(t, "web-1 passing", func() bool {
		c, ok := healthOf(t, a, "web")
		return ok && c.AggregatedStatus() == api.HealthPassing
	})
	for _, st := range []string{api.HealthWarning, api.HealthCritical, api.HealthPassing} {
		a.SetCheck(t, check, st)
		waitFor(t, "web-1 "+st, func() bool {
			c, ok := healthOf(t, a, "web")
			return ok && c.AggregatedStatus() == st
		})
	}
	a.Maintenance(t, "web-1", true)
	waitFor(t, "service maintenance", func() bool {
		c, ok := healthOf(t, a, "web")
		return ok && c.AggregatedStatus() == api.HealthMaint
	})
	a.Maintenance(t, "web-1", false)
	a.NodeMaintenance(t, true)
	waitFor(t, "node maintenance", func() bool {
		c, ok := healthOf(t, a, "web")
		return ok && c.AggregatedStatus() == api.HealthMaint
	})
	a.NodeMaintenance(t, false)

	_, meta, err := a.Client().Health().Service("web", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := meta.LastIndex

	addr := a.Addr()
	a.Stop()
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("HTTP port still accepts connections after Stop")
	}
	a.Stop() // idempotent

	start = time.Now()
	a.Restart()
	t.Logf("restarted in %s", time.Since(start))
	if a.Addr() != addr {
		t.Fatalf("restart moved the agent from %s to %s", addr, a.Addr())
	}
	entries, meta, err := a.Client().Health().Service("web", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Fatalf("dev-mode restart kept %d instances", len(entries))
	}
	if meta.LastIndex >= before {
		t.Fatalf("index after restart %d, want below %d", meta.LastIndex, before)
	}
}

func TestAgentWithACLs(t *testing.T) {
	const mgmt = "3f7c9d62-8a1e-4b6f-9c2d-5e8f7a6b4c31"
	a := Start(t, WithACLs(mgmt))
	a.RegisterTTL(t, "db-1", "db", "10.0.0.2", 5432, nil, nil)
	waitFor(t, "db-1 in the catalog", func() bool { _, ok := healthOf(t, a, "db"); return ok })

	anon, err := api.NewClient(&api.Config{Address: a.Addr(), Token: "anonymous"})
	if err != nil {
		t.Fatal(err)
	}
	entries, meta, err := anon.Health().Service("db", "", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 || !meta.ResultsFilteredByACLs {
		t.Fatalf("anonymous read %d entries, filtered=%v; want 0, true", len(entries), meta.ResultsFilteredByACLs)
	}
}

func TestFreePortsDistinct(t *testing.T) {
	p, err := freePorts()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, n := range []int{p.http, p.server, p.serfLAN, p.serfWAN} {
		if n == 0 || seen[n] {
			t.Fatalf("ports %+v not distinct", p)
		}
		seen[n] = true
	}
}

// TestStartRetriesWhenAPortIsTaken hands the first launch an HTTP port that
// another listener holds: Consul fails to bind it and Start retries with new
// ports.
func TestStartRetriesWhenAPortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	calls := 0
	pickPorts = func() (ports, error) {
		calls++
		p, err := freePorts()
		if calls == 1 {
			p.http = taken.Addr().(*net.TCPAddr).Port
		}
		return p, err
	}
	defer func() { pickPorts = freePorts }()

	a := Start(t)
	if calls != 2 {
		t.Fatalf("ports picked %d times, want 2", calls)
	}
	if a.Addr() == taken.Addr().String() {
		t.Fatal("agent reports the taken port")
	}
	if _, _, err := a.Client().Health().Service("web", "", false, nil); err != nil {
		t.Fatalf("agent not usable after the retry: %v", err)
	}
}

func TestStartMain(t *testing.T) {
	a, stop, err := StartMain()
	if err != nil {
		t.Fatal(err)
	}
	a.RegisterTTL(t, "web-1", "web", "10.0.0.1", 80, nil, nil)
	dir := filepath.Dir(a.LogPath())
	stop(false)
	if _, err := net.DialTimeout("tcp", a.Addr(), time.Second); err == nil {
		t.Fatal("agent still listening after stop")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("agent directory %s not removed: %v", dir, err)
	}
}

// TestAgentDiesWithCrashedTest runs a child test binary that starts an agent
// and crashes without running cleanups: the agent must not outlive it.
func TestAgentDiesWithCrashedTest(t *testing.T) {
	if os.Getenv("CONSULTEST_CRASH_CHILD") == "1" {
		a := Start(t)
		fmt.Printf("AGENT_ADDR=%s AGENT_PID=%d\n", a.Addr(), a.cmd.Process.Pid)
		go panic("simulated crash") // outside the test goroutine: no cleanup runs
		select {}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentDiesWithCrashedTest$")
	cmd.Env = append(os.Environ(), "CONSULTEST_CRASH_CHILD=1")
	out, _ := cmd.CombinedOutput()
	_, after, ok := strings.Cut(string(out), "AGENT_ADDR=")
	if !ok {
		t.Fatalf("child did not start an agent:\n%s", out)
	}
	var addr string
	var pid int
	if _, err := fmt.Sscanf(after, "%s AGENT_PID=%d", &addr, &pid); err != nil {
		t.Fatalf("child output %q: %v", after, err)
	}
	defer syscall.Kill(-pid, syscall.SIGKILL) // if the test fails, do not leave the orphan
	waitFor(t, "the orphaned agent to die", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}

// TestAgentWithTLS: WithTLS serves the API over HTTPS only and requires a
// client certificate: the harness's own client (CA and client certificate)
// works, plain HTTP on the port is refused, and so are a client without a
// certificate and one that does not trust the agent's CA.
func TestAgentWithTLS(t *testing.T) {
	a := Start(t, WithTLS())
	if !strings.HasPrefix(a.URL(), "https://") || a.TLS() == nil {
		t.Fatalf("URL %s, TLS %+v", a.URL(), a.TLS())
	}
	a.RegisterTTL(t, "tls-1", "tls-web", "10.0.0.3", 443, nil, nil)
	waitFor(t, "tls-1 in the catalog", func() bool { _, ok := healthOf(t, a, "tls-web"); return ok })

	get := func(tc *tls.Config, url string) (int, string, error) {
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DisableKeepAlives: true}}
		resp, err := c.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	caPEM, err := os.ReadFile(a.TLS().CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if code, body, err := get(nil, "http://"+a.Addr()+"/v1/status/leader"); err != nil || code != http.StatusBadRequest ||
		!strings.Contains(body, "HTTP request to an HTTPS server") {
		t.Errorf("plain HTTP: %d %q %v, want Consul's 400", code, body, err)
	}
	if _, _, err := get(&tls.Config{RootCAs: pool}, a.URL()+"/v1/status/leader"); err == nil {
		t.Error("a client without a certificate was served (verify_incoming is off)")
	}
	cert, err := tls.LoadX509KeyPair(a.TLS().ClientCert, a.TLS().ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := get(&tls.Config{Certificates: []tls.Certificate{cert}}, a.URL()+"/v1/status/leader"); err == nil ||
		!strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("a client without the CA: %v, want an unknown-authority error", err)
	}
	if code, body, err := get(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}, a.URL()+"/v1/status/leader"); err != nil || code != 200 {
		t.Errorf("CA and client certificate: %d %q %v", code, body, err)
	}
}

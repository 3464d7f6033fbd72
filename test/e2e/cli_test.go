package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// everyLineJSON fails the test for each line of out that is not a JSON
// object.
func everyLineJSON(t *testing.T, out string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("not a JSON line: %q", line)
		}
	}
}

// TestLogJSONEveryLine: with -log-json every line the process writes is
// JSON: the start, a reload by SIGHUP, a rejected reload's diagnostics, the
// signal messages, a SIGHUP while draining (refused, logged) and the
// second signal's forced exit.
func TestLogJSONEveryLine(t *testing.T) {
	be := newHTTP1Backend(t, "json-1")
	a := startAgent(t, baseHCL()+staticUpstreamHCL("web", "/", "", be))
	a.Signal(syscall.SIGHUP)
	a.waitLog(5*time.Second, "configuration reloaded", nil)
	good, err := os.ReadFile(a.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(a.ConfigPath, append(good, "bogus = 1\n"...), 0o644)
	a.Signal(syscall.SIGHUP)
	rejected := a.waitLog(5*time.Second, "reload rejected; keeping the running configuration", nil)
	if d, _ := rejected["diagnostic"].(string); !strings.HasPrefix(d, a.ConfigPath+":") {
		t.Errorf("rejected reload: diagnostic %q does not start with %s:line:column", d, a.ConfigPath)
	}
	os.WriteFile(a.ConfigPath, good, 0o644)

	// A request in flight keeps the drain going.
	c, _ := newH3Client(t)
	go func() {
		if resp, err := c.Get(a.URL("/stall?sleep=30s")); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, 5*time.Second, "the request in flight", func() bool { return be.Hits() > 0 })
	a.Signal(syscall.SIGTERM)
	a.waitLog(5*time.Second, "shutting down: draining listeners", nil)
	a.Signal(syscall.SIGHUP)
	a.waitLog(5*time.Second, "reload refused: the gateway is draining", nil)
	if code, body := a.control("POST", "/v1/reload", nil); code != http.StatusConflict || !strings.Contains(string(body), "draining") {
		t.Errorf("POST /v1/reload while draining: %d %s, want 409", code, body)
	}
	// A second signal counts only a second after the first (see main.go).
	time.Sleep(1100 * time.Millisecond)
	a.Signal(syscall.SIGTERM)
	if code := a.WaitExit(10 * time.Second); code != 1 {
		t.Errorf("exit code %d after the second signal, want 1", code)
	}
	for _, msg := range []string{"signal received: reloading", "signal received: draining and stopping", "second signal: closing connections and exiting now"} {
		if e, _ := a.logs.find(msg, nil); e == nil {
			t.Errorf("no JSON line %q", msg)
		}
	}
	everyLineJSON(t, a.Logs())
}

// TestLogJSONFatalStart: a start failure (the listener's port in use) with
// -log-json is JSON too, and points at the listener's address.
func TestLogJSONFatalStart(t *testing.T) {
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := strings.Replace(baseHCL(), `listener "public" {
  address = "127.0.0.1:0"`, fmt.Sprintf("listener \"public\" {\n  address = %q", busy.LocalAddr().String()), 1)
	path := t.TempDir() + "/agent.hcl"
	os.WriteFile(path, []byte(cfg), 0o644)
	out, err := exec.Command(agentBin, "-config="+path, "-log-json").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1\n%s", err, out)
	}
	everyLineJSON(t, string(out))
	want := path + ":9:13: Cannot bind listener address: listener \"public\" address: listen udp " + busy.LocalAddr().String() + ": bind: address already in use."
	if !strings.Contains(string(out), fmt.Sprintf("%q", want)) {
		t.Errorf("no diagnostic %q in\n%s", want, out)
	}
}

// TestDevRemovesItsDirectory: -dev removes its temporary directory when it
// stops on SIGTERM and when it cannot start (control port in use); the
// probe command it logs works as printed.
func TestDevRemovesItsDirectory(t *testing.T) {
	tmp := t.TempDir()
	empty := func() bool { es, _ := os.ReadDir(tmp); return len(es) == 0 }

	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cmd := exec.Command(agentBin, "-dev", "-dev-listen", "127.0.0.1:0", "-dev-control", busy.Addr().String())
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "Cannot bind control address") {
		t.Fatalf("-dev with the control port in use: %v\n%s", err, out)
	}
	if !empty() {
		t.Errorf("-dev left its directory after a failed start: %v", must(os.ReadDir(tmp)))
	}

	os.Setenv("TMPDIR", tmp) // startAgent's child inherits it
	defer os.Unsetenv("TMPDIR")
	a := startAgent(t, "", "-dev", "-dev-listen", "127.0.0.1:0", "-dev-control", "127.0.0.1:0")
	os.Unsetenv("TMPDIR")
	try := a.waitLog(5*time.Second, "dev mode: try it", nil)
	command, _ := try["command"].(string)
	args := strings.Fields(command)
	if len(args) < 2 || args[0] != agentBin {
		t.Fatalf("dev mode: try it: %q does not start with the binary %s", command, agentBin)
	}
	pout, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(pout), "hello from dev-") {
		t.Errorf("the printed command %q: %v\n%s", command, err, pout)
	}
	if empty() {
		t.Fatal("no -dev directory while running")
	}
	a.Stop()
	if !empty() {
		t.Errorf("-dev left its directory after SIGTERM: %v", must(os.ReadDir(tmp)))
	}
}

func must[T any](v T, _ error) T { return v }

// TestStaticBackendsWhileConsulDown: an upstream with static backends and a
// consul block serves its static backends while Consul has never answered
// (discovery_pending is only for an upstream with nothing to serve).
// /v1/ready still waits for the first answer of every Consul watch at
// startup (README, Consul discovery).
func TestStaticBackendsWhileConsulDown(t *testing.T) {
	consul := consultest.Start(t)
	consul.Stop()
	be := newHTTP1Backend(t, "static-1")
	cfg := baseHCL() + consulUpstreamHCL(consul.Addr(), "e2e-static-down", `    scheme = "http"`,
		fmt.Sprintf("  backend %q {\n    address = %q\n  }\n", be.Name, be.URL))
	a := startAgent(t, cfg)
	a.waitLog(10*time.Second, "consul query failed; keeping the last known instances", nil)
	c, _ := newH3Client(t)
	for range 3 {
		r := mustGet(t, c, a.URL("/x"))
		if r.Status != http.StatusOK || r.Body != "hello from static-1\n" {
			t.Fatalf("GET /x while Consul is down: %d %q x-impulse-error=%q, want the static backend", r.Status, r.Body, r.Header.Get("X-Impulse-Error"))
		}
	}
	code, ready := a.readyStatus()
	t.Logf("/v1/ready while Consul is down: %d %+v", code, ready)
	a.Stop()
}

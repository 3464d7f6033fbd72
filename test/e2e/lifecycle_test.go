package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// TestSIGTERMDrainsSlowResponse: SIGTERM while a slow response (first part,
// a 2 s pause, the rest) is in flight lets it complete intact; meanwhile the
// agent is not ready and refuses new requests; then it exits 0 and its log
// shows the drain.
func TestSIGTERMDrainsSlowResponse(t *testing.T) {
	be := newHTTP1Backend(t, "slow-1")
	a := startAgent(t, baseHCL()+staticUpstreamHCL("slow", "/", "", be))
	c, _ := newH3Client(t)

	const first, total = 64 << 10, 4 * MiB
	start := time.Now()
	resp, err := c.Get(a.URL(fmt.Sprintf("/slow?first=%d&total=%d&sleep=2s", first, total)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	h := newCountingHash()
	if _, err := io.CopyN(h, resp.Body, first); err != nil {
		t.Fatalf("reading the first part: %v", err)
	}
	// The response is now in flight, with the backend sleeping.
	a.Signal(syscall.SIGTERM)
	signaled := time.Now()
	a.waitLog(5*time.Second, "shutting down: draining listeners", nil)

	if code, r := a.readyStatus(); code != http.StatusServiceUnavailable || !contains(r.Reasons, "draining") {
		t.Errorf("/v1/ready while draining: %d %+v, want 503 with reason draining", code, r)
	}
	// New requests get nowhere: the listener stops accepting connections
	// (quic-go drops their handshakes) and the existing connection has
	// received GOAWAY (quic-go's client then tries a new connection, which
	// gets nowhere either). The agent logs the drain just before it closes
	// the listener, so the first attempts may race with that: poll until a
	// new connection fails, then expect every new request to fail.
	attempt := func(c *http.Client, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL("/new"), nil)
		r, err := c.Do(req)
		if err == nil {
			r.Body.Close()
			return fmt.Errorf("answered %d", r.StatusCode)
		}
		return err
	}
	waitFor(t, 3*time.Second, "new connections to be refused", func() bool {
		tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool}}
		defer tr.Close()
		return attempt(&http.Client{Transport: tr}, 250*time.Millisecond) != nil
	})
	hits := be.Hits()
	fresh, _ := newH3Client(t)
	for _, tc := range []struct {
		what   string
		client *http.Client
	}{{"a new connection", fresh}, {"the draining connection", c}} {
		err := attempt(tc.client, time.Second)
		if strings.HasPrefix(err.Error(), "answered") {
			t.Errorf("a request on %s after SIGTERM was %v", tc.what, err)
		} else {
			t.Logf("request on %s after SIGTERM: %v", tc.what, err)
		}
	}
	if be.Hits() != hits {
		t.Errorf("requests sent after the drain began reached the backend")
	}
	if a.Exited() {
		t.Fatalf("the agent exited while a response was in flight")
	}

	n, err := io.Copy(h, resp.Body)
	if err != nil {
		t.Fatalf("the in-flight response broke after SIGTERM: %v after %d bytes", err, first+n)
	}
	if h.n != total || h.Sum() != patternSHA256(total) {
		t.Fatalf("in-flight response: %d bytes sha256 %s, want %d bytes %s", h.n, h.Sum(), total, patternSHA256(total))
	}
	completed := time.Now()
	if code := a.WaitExit(15 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	t.Logf("response completed %s after the request, %s after SIGTERM; process exited %s after SIGTERM",
		completed.Sub(start).Round(time.Millisecond), completed.Sub(signaled).Round(time.Millisecond), time.Since(signaled).Round(time.Millisecond))
	if e, _ := a.logs.find("stopped", nil); e == nil {
		t.Errorf("no \"stopped\" log line")
	}
	if e, _ := a.logs.find("drain ended early; remaining connections closed", nil); e != nil {
		t.Errorf("the drain ran out of time: %v", e)
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestReload: POST /v1/reload and SIGHUP apply a rewritten configuration
// without a restart (new routes work, the generation increments); an
// invalid configuration answers 400 with file:line diagnostics and the
// running routes keep working.
func TestReload(t *testing.T) {
	oldB := newHTTP1Backend(t, "old-1")
	newB := newH2Backend(t, "new-1")
	hupB := newHTTP1Backend(t, "hup-1")
	cfg1 := baseHCL() + staticUpstreamHCL("old", "/old/", "", oldB)
	a := startAgent(t, cfg1)
	c, _ := newH3Client(t)
	pid := a.PID

	expectBody := func(path string, status int, prefix string) {
		t.Helper()
		r := mustGet(t, c, a.URL(path))
		if r.Status != status || !strings.HasPrefix(r.Body, prefix) {
			t.Fatalf("GET %s: %d %q, want %d %q", path, r.Status, r.Body, status, prefix)
		}
	}
	expectBody("/old/x", 200, "hello from old-1")
	expectBody("/new/x", 404, "")

	write := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(a.ConfigPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reload := func() (int, map[string]any) {
		t.Helper()
		code, b := a.control("POST", "/v1/reload", nil)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("/v1/reload: %v in %q", err, b)
		}
		return code, m
	}

	// 1. A new route (to an HTTP/2 backend) via POST /v1/reload.
	cfg2 := cfg1 + staticUpstreamHCL("new", "/new/", tlsHCL(newB.CAFile), newB)
	write(cfg2)
	code, m := reload()
	if code != http.StatusOK || m["generation"] != float64(2) {
		t.Fatalf("POST /v1/reload: %d %v, want 200 generation 2", code, m)
	}
	expectBody("/new/x", 200, "hello from new-1")
	expectBody("/old/x", 200, "hello from old-1")
	if got := routes(t, a); !strings.Contains(got, "/new/") {
		t.Errorf("/v1/routes after reload lacks /new/: %s", got)
	}

	// 2. An invalid configuration: 400, diagnostics, nothing changes.
	write(cfg2 + "\nupstream \"broken\" {\n  load_balancing = \"fastest\"\n  route {\n    path_prefix = \"/broken/\"\n  }\n}\n")
	code, m = reload()
	if code != http.StatusBadRequest {
		t.Fatalf("POST /v1/reload with an invalid config: %d %v, want 400", code, m)
	}
	diags, _ := json.Marshal(m["diagnostics"])
	t.Logf("400 diagnostics: %s", diags)
	if !strings.Contains(string(diags), a.ConfigPath+":") || !strings.Contains(string(diags), "load_balancing") {
		t.Errorf("diagnostics %s do not name %s:LINE and load_balancing", diags, a.ConfigPath)
	}
	expectBody("/old/x", 200, "hello from old-1")
	expectBody("/new/x", 200, "hello from new-1")
	expectBody("/broken/x", 404, "")

	// 3. SIGHUP with a valid file: generation 3, new route, old ones kept.
	write(cfg2 + staticUpstreamHCL("hup", "/hup/", "", hupB))
	a.Signal(syscall.SIGHUP)
	a.waitLog(5*time.Second, "configuration reloaded", func(e map[string]any) bool { return e["generation"] == float64(3) })
	expectBody("/hup/x", 200, "hello from hup-1")
	expectBody("/new/x", 200, "hello from new-1")
	expectBody("/old/x", 200, "hello from old-1")
	// A rejected SIGHUP is logged and changes nothing.
	write("this is { not hcl")
	a.Signal(syscall.SIGHUP)
	a.waitLog(5*time.Second, "reload rejected; keeping the running configuration", nil)
	expectBody("/hup/x", 200, "hello from hup-1")

	if a.PID != pid || a.Exited() {
		t.Fatalf("the agent restarted or exited during reloads")
	}
	a.Stop()
}

func routes(t *testing.T, a *agentProc) string {
	t.Helper()
	code, b := a.control("GET", "/v1/routes", nil)
	if code != http.StatusOK {
		t.Fatalf("/v1/routes: %d %s", code, b)
	}
	return string(b)
}

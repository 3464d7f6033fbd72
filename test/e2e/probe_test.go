package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

// TestProbeCommand: `impulse-agent probe -cacert cert.pem -n 5 URL` exits 0
// and prints a status tally; against a route that answers 503 it exits 1.
func TestProbeCommand(t *testing.T) {
	be := newHTTP1Backend(t, "probe-1")
	// /pending/ belongs to a Consul-fed upstream whose Consul never answers
	// (nothing listens on that port): it answers 503 discovery_pending.
	cfg := baseHCL() + fmt.Sprintf(`
consul {
  address = "127.0.0.1:%d"
}

upstream "pending" {
  route {
    path_prefix = "/pending/"
  }
  consul {
    service = "nobody"
    scheme  = "http"
  }
}
`, closedPort(t)) + staticUpstreamHCL("ok", "/", "", be)
	a := startAgent(t, cfg)

	run := func(args ...string) (code int, stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(agentBin, append([]string{"probe"}, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), out.String(), errb.String()
		} else if err != nil {
			t.Fatalf("probe: %v", err)
		}
		return 0, out.String(), errb.String()
	}

	code, stdout, stderr := run("-cacert", certFile, "-n", "5", a.URL("/hello"))
	t.Logf("probe -n 5 /hello: exit %d\nstdout:\n%sstderr:\n%s", code, stdout, stderr)
	if code != 0 {
		t.Errorf("probe -n 5 against a 200 route: exit %d, want 0", code)
	}
	if !strings.Contains(stderr, "200: 5") || !strings.Contains(stderr, "errors: 0") {
		t.Errorf("probe -n 5: no tally \"200: 5\" / \"errors: 0\" in stderr")
	}
	// With -n > 1 (and no -v) bodies are discarded; the backend saw them all.
	if got := be.Hits(); got != 5 {
		t.Errorf("backend saw %d requests, want 5", got)
	}
	code, stdout, _ = run("-cacert", certFile, a.URL("/hello"))
	if code != 0 || !strings.HasPrefix(stdout, "hello from probe-1") {
		t.Errorf("probe (once): exit %d, stdout %q; want 0 and the body", code, stdout)
	}

	code, stdout, stderr = run("-cacert", certFile, "-n", "2", a.URL("/pending/x"))
	t.Logf("probe -n 2 /pending/x: exit %d\nstdout:\n%sstderr:\n%s", code, stdout, stderr)
	if code != 1 {
		t.Errorf("probe against a 503 route: exit %d, want 1", code)
	}
	if !strings.Contains(stderr, "503: 2") {
		t.Errorf("probe -n 2: no tally \"503: 2\" in stderr")
	}

	// Without -cacert the self-signed certificate is refused.
	code, _, stderr = run("-n", "1", a.URL("/hello"))
	if code != 1 || !strings.Contains(stderr, "certificate") {
		t.Errorf("probe without -cacert: exit %d, stderr %q; want 1 and a certificate error", code, stderr)
	}
	a.Stop()
}

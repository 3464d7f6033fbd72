package gateway

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/impulse-agent/impulse-agent/internal/testtool"
)

// tool is the path of a test client installed by scripts/deps.sh; CI
// never skips it (testtool.Need).
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	return testtool.Need(t, name, pkg)
}

// run runs a client for at most 60 s and returns its combined output.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestRealClientsOverTCP: curl and h2load (nghttp2) reach the TCP ingress
// over HTTP/1.1 and HTTP/2 and get the gateway's Alt-Svc.
func TestRealClientsOverTCP(t *testing.T) {
	curl := tool(t, "curl", "curl")
	h2load := tool(t, "h2load", "nghttp2-client")
	be := testbackend.NewH1(t, named("u"))
	h := newHarnessOver(t, ProtocolH2, staticUpstream("u", "/", be))
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, h.cert.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	url := h.base + "/hello"
	for _, c := range []struct{ flag, version string }{{"--http1.1", "1.1"}, {"--http2", "2"}} {
		out := run(t, curl, "-sS", c.flag, "--cacert", ca, "-D", "-", "-o", "/dev/null",
			"-w", "code=%{http_code} version=%{http_version}\n", url)
		if !strings.Contains(out, "code=200 version="+c.version) {
			t.Errorf("curl %s: %s", c.flag, out)
		}
		if !regexp.MustCompile(`(?im)^alt-svc: h3=":\d+"; ma=86400\r?$`).MatchString(out) {
			t.Errorf("curl %s: no Alt-Svc for h3:\n%s", c.flag, out)
		}
	}
	for _, args := range [][]string{
		{"-n", "400", "-c", "1", "-m", "50"},        // HTTP/2: one connection, 50 streams
		{"-n", "400", "-c", "8", "-m", "1"},         // HTTP/2: eight connections
		{"--h1", "-n", "400", "-c", "8", "-m", "1"}, // HTTP/1.1 keep-alive
	} {
		out := run(t, h2load, append(args, url)...)
		if !strings.Contains(out, "400 succeeded, 0 failed") || !strings.Contains(out, "status codes: 400 2xx") {
			t.Errorf("h2load %v:\n%s", args, out)
		}
	}
	if n := requestsCountedOver(h.gw, ProtocolH1, "u", "2xx", "") + requestsCountedOver(h.gw, ProtocolH2, "u", "2xx", ""); n != 1202 {
		t.Errorf("%d requests counted, want 1202", n)
	}
	eventually(t, 5*time.Second, func() bool {
		return h.gw.obs.Metrics.Conns(true, "test") == 0
	}, "impulse_tcp_connections to return to 0")
}

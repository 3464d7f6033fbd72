package e2e

import (
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDevMode: -dev with kernel-chosen ports answers over HTTP/3 from its two
// built-in demo backends in turn, and is ready.
func TestDevMode(t *testing.T) {
	a := startAgent(t, "", "-dev", "-dev-listen", "127.0.0.1:0", "-dev-control", "127.0.0.1:0")
	// -dev generates its own certificate; the "try it" line names the file.
	try := a.waitLog(5*time.Second, "dev mode: try it", nil)
	command, _ := try["command"].(string)
	m := regexp.MustCompile(`-cacert (\S+)`).FindStringSubmatch(command)
	if m == nil {
		t.Fatalf("dev mode: try it: no -cacert in %q", command)
	}
	pemBytes, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatalf("reading the -dev certificate: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		t.Fatalf("%s: no PEM certificate", m[1])
	}
	c, _ := newH3ClientWithRoots(t, roots)
	var names []string
	for range 6 {
		r := mustGet(t, c, a.URL("/"))
		if r.Status != http.StatusOK {
			t.Fatalf("GET /: status %d, body %q", r.Status, r.Body)
		}
		switch {
		case strings.HasPrefix(r.Body, "hello from dev-1"):
			names = append(names, "dev-1")
		case strings.HasPrefix(r.Body, "hello from dev-2"):
			names = append(names, "dev-2")
		default:
			t.Fatalf("GET /: unexpected body %q", r.Body)
		}
	}
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			t.Fatalf("round robin did not alternate: %v", names)
		}
	}
	t.Logf("backends in order: %v", names)
	if code, r := a.readyStatus(); code != http.StatusOK || !r.Ready {
		t.Fatalf("/v1/ready: %d %+v, want 200", code, r)
	}
	if code, _ := a.control("GET", "/v1/health", nil); code != http.StatusOK {
		t.Fatalf("/v1/health: %d", code)
	}
	code, metrics := a.control("GET", "/metrics", nil)
	if re := regexp.MustCompile(`(?m)^impulse_requests\{[^}]*code="2xx"[^}]*\} 6$`); code != http.StatusOK || !re.Match(metrics) {
		t.Errorf("/metrics: %d, no impulse_requests{code=\"2xx\"...} 6 line:\n%s", code, metrics)
	}
	a.Stop()
}

// TestValidate: `impulse-agent validate` accepts a good configuration with
// exit code 0 and rejects a bad one with exit code 1 and diagnostics naming
// the file, the line and the field.
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.hcl")
	if err := os.WriteFile(good, []byte(baseHCL()+`
upstream "web" {
  route {
    path_prefix = "/"
  }
  backend "web-1" {
    address = "http://127.0.0.1:8080"
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(agentBin, "validate", "-config="+good).CombinedOutput()
	if err != nil {
		t.Fatalf("validate good.hcl: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "configuration is valid") {
		t.Errorf("validate good.hcl: unexpected output %q", out)
	}

	bad := filepath.Join(dir, "bad.hcl")
	// load_balancing on line 4 is the only problem in a block (the missing
	// listener is reported at line 1).
	if err := os.WriteFile(bad, []byte(`control {
}
upstream "web" {
  load_balancing = "fastest"
  route {
    path_prefix = "/"
  }
  backend "web-1" {
    address = "http://127.0.0.1:8080"
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agentBin, "validate", "-config="+bad)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errorsAs(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("validate bad.hcl: %v, want exit code 1\n%s", err, stderr.String())
	}
	msg := stderr.String()
	t.Logf("validate bad.hcl stderr:\n%s", msg)
	// hcl/v2's text writer says "on FILE line N"; the one-line format says FILE:N:C.
	fileLine := regexp.MustCompile(regexp.QuoteMeta(bad) + `(:4:\d+| line 4\b)`)
	if !fileLine.MatchString(msg) {
		t.Errorf("diagnostics do not name %s line 4", bad)
	}
	if !strings.Contains(msg, "load_balancing") {
		t.Errorf("diagnostics do not name the field load_balancing")
	}
}

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// TestAccessLogReload: the access log is written at log_level "error"
// too; a reload whose path cannot be opened is refused at that path and
// the running log goes on; ReopenAccessLog (SIGUSR1) after a rename
// writes to a new file; a reload to another path and format switches.
func TestAccessLogReload(t *testing.T) {
	a := backend(t, "a")
	logDir := t.TempDir()
	path, other := filepath.Join(logDir, "access.log"), filepath.Join(logDir, "other.log")
	upstream := fmt.Sprintf("upstream \"a\" {\n  route {}\n  backend \"a\" {\n    address = %q\n  }\n}\n", a.URL)
	withLog := func(block string) string { return "log_level = \"error\"\n" + block + baseConfig + upstream }
	r := start(t, withLog(fmt.Sprintf("access_log {\n  path = %q\n}\n", path)))
	lines := func(p string) int {
		b, _ := os.ReadFile(p)
		return strings.Count(string(b), "\n")
	}
	getAndWait := func(p string, n int) {
		t.Helper()
		if code, _ := r.get(t, r.url("main", "/x")); code != 200 {
			t.Fatalf("GET: %d", code)
		}
		deadline := time.Now().Add(10 * time.Second)
		for lines(p) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d lines in %s, want %d", lines(p), p, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	getAndWait(path, 1)

	cert, key := filepath.Join(r.dir, "cert.pem"), filepath.Join(r.dir, "key.pem")
	write := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(r.cfg, []byte(fmt.Sprintf(cfg, cert, key)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(withLog(fmt.Sprintf("access_log {\n  path = %q\n}\n", filepath.Join(logDir, "missing", "access.log"))))
	gen, diags, err := r.a.Reload()
	if err == nil || gen != 1 || len(diags) != 1 || !strings.Contains(diags[0], "gateway.hcl:3:10: Unwritable access log: access_log path:") {
		t.Fatalf("reload to an unwritable path: generation %d, %v, %q", gen, err, diags)
	}
	getAndWait(path, 2) // the running log goes on

	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := r.a.ReopenAccessLog(); err != nil {
		t.Fatal(err)
	}
	getAndWait(path, 1)
	if lines(path+".1") != 2 {
		t.Errorf("%d lines in the rotated file, want 2", lines(path+".1"))
	}

	write(withLog(fmt.Sprintf("access_log {\n  path   = %q\n  format = \"combined\"\n}\n", other)))
	if _, diags, err := r.a.Reload(); err != nil {
		t.Fatal(err, diags)
	}
	getAndWait(other, 1)
	if b, _ := os.ReadFile(other); !strings.HasPrefix(string(b), "127.0.0.1 - - [") {
		t.Errorf("not the combined format: %q", b)
	}
	if strings.Contains(r.logs.String(), "[INFO]") {
		t.Errorf("log_level error let info lines through:\n%s", r.logs)
	}
}

// TestAccessLogOpenErrorAtPath: a file the gateway cannot open (between
// validation and the apply) is a diagnostic at access_log path.
func TestAccessLogOpenErrorAtPath(t *testing.T) {
	rng := hcl2.Range{Filename: "gateway.hcl", Start: hcl2.Pos{Line: 2, Column: 10}, End: hcl2.Pos{Line: 2, Column: 20}}
	cfg := &hcl.Config{AccessLog: &hcl.AccessLog{Path: "/x/a.log", PathRange: rng}}
	err := bindError(cfg, fmt.Errorf("gateway: %w", &accesslog.OpenError{Path: "/x/a.log", Err: syscall.EACCES}))
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Error() != `gateway.hcl:2:10: Cannot open access log: access_log path: "/x/a.log": permission denied.` {
		t.Fatalf("%v", err)
	}
}

// TestReopenAccessLogWithoutFile: SIGUSR1 without an access_log block, or
// with the log on stdout, reopens nothing and says so instead of "access
// log reopened".
func TestReopenAccessLogWithoutFile(t *testing.T) {
	a := backend(t, "a")
	upstream := fmt.Sprintf("upstream \"a\" {\n  route {}\n  backend \"a\" {\n    address = %q\n  }\n}\n", a.URL)
	r := start(t, baseConfig+upstream)
	if err := r.a.ReopenAccessLog(); err != nil {
		t.Fatal(err)
	}
	r.reload(t, "access_log {\n  path = \"stdout\"\n}\n"+baseConfig+upstream)
	if err := r.a.ReopenAccessLog(); err != nil {
		t.Fatal(err)
	}
	logs := r.logs.String()
	for _, want := range []string{"access log: nothing to reopen: no access_log block", "access log: nothing to reopen: it writes to stdout: path=stdout"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no %q in the log:\n%s", want, logs)
		}
	}
	if strings.Contains(logs, "access log reopened") {
		t.Errorf("\"access log reopened\" without a file:\n%s", logs)
	}
}

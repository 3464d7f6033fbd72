// Package testtool finds the programs the tests drive (the Debian clients
// scripts/deps.sh installs, systemd-analyze, the Jaeger scripts/jaeger.sh
// builds) and decides what a missing one means: in CI the test fails, so a
// CI run never passes a test that tested nothing; elsewhere it is skipped,
// saying how to get the program. It is imported only by tests
// (TestTestOnlyPackages).
package testtool

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// CI reports whether the tests run in CI: the CI variable is set and not a
// false boolean (CI=true, as GitHub Actions, GitLab CI and .ci/run set it;
// CI=1 or CI=yes too; CI=false and CI=0 are not CI).
func CI() bool {
	v := strings.TrimSpace(os.Getenv("CI"))
	b, err := strconv.ParseBool(v)
	return v != "" && (err != nil || b)
}

// Missing fails the test in CI and skips it elsewhere, with the message
// formatted as by fmt.Sprintf.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if CI() {
		t.Fatalf(format+" (CI: a missing tool fails the test)", args...)
	}
	t.Skipf(format, args...)
}

// Need returns the path of the program name (exec.LookPath), which the
// Debian package pkg provides and scripts/deps.sh installs; when it is not
// installed the test is Missing.
func Need(t testing.TB, name, pkg string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s (Debian %s) not installed: run scripts/deps.sh (make deps)", name, pkg)
	}
	return bin
}

// Built returns the program that $env names (it must be an executable
// file, or the test fails), or else the path that the repository's
// scripts/<script> prints on its last line: such a script builds the
// program once and caches it (scripts/jaeger.sh), so the first run takes
// minutes and later ones answer at once. When the script fails the test is
// Missing.
func Built(t testing.TB, env, script string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			t.Fatalf("%s=%s is not an executable file", env, p)
		}
		return p
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testtool: runtime.Caller failed")
	}
	path := filepath.Join(filepath.Dir(self), "..", "..", "scripts", script)
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", path)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		Missing(t, "%s is not set and scripts/%s failed (%v): %s", env, script, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	bin := strings.TrimSpace(lines[len(lines)-1])
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		t.Fatalf("scripts/%s printed %q, which is not a file", script, bin)
	}
	return bin
}

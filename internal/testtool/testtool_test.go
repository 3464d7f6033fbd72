package testtool

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestCI(t *testing.T) {
	for v, want := range map[string]bool{"": false, "true": true, "1": true, "yes": true, "false": false, "0": false, " TRUE ": true} {
		t.Setenv("CI", v)
		if got := CI(); got != want {
			t.Errorf("CI=%q: %v, want %v", v, got, want)
		}
	}
}

// TestMissingFailsInCI runs TestMissingChild in a child process: a missing
// program skips the test outside CI and fails it in CI, saying which
// program and how to get it.
func TestMissingFailsInCI(t *testing.T) {
	if os.Getenv("TESTTOOL_CHILD") == "1" {
		t.Skip("the child's own run")
	}
	for _, tc := range []struct {
		ci, want string
		fails    bool
	}{
		{ci: "", want: "--- SKIP: TestMissingChild"},
		{ci: "false", want: "--- SKIP: TestMissingChild"},
		{ci: "true", want: "--- FAIL: TestMissingChild", fails: true},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMissingChild$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTTOOL_CHILD=1", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if (err != nil) != tc.fails || !strings.Contains(string(out), tc.want) ||
			!strings.Contains(string(out), "no-such-tool-impulse (Debian no-such-package) not installed: run scripts/deps.sh") {
			t.Errorf("CI=%q: %v, want %q and the tool named:\n%s", tc.ci, err, tc.want, out)
		}
	}
}

// TestMissingChild needs a program that does not exist; it runs only as
// TestMissingFailsInCI's child.
func TestMissingChild(t *testing.T) {
	if os.Getenv("TESTTOOL_CHILD") != "1" {
		t.Skip("run by TestMissingFailsInCI")
	}
	Need(t, "no-such-tool-impulse", "no-such-package")
	t.Error("Need returned for a missing program")
}

// Package dist holds packaging examples for impulse-agent (a systemd unit);
// its test keeps them consistent with the agent's signals and defaults.
package dist

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/internal/testtool"
)

// unit reads a systemd unit file into key → values (in order, sections
// merged: the keys checked here are unique to [Service]).
func unit(t *testing.T, file string) map[string][]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not key=value", file, line)
		}
		out[k] = append(out[k], v)
	}
	return out
}

// TestSystemdUnit: the unit reloads with SIGHUP (the agent's reload
// signal), stops with SIGTERM (its drain) and waits longer than the default
// drain_timeout, binds 443 as an unprivileged user through
// CAP_NET_BIND_SERVICE only, and passes `systemd-analyze verify` (Debian
// systemd, installed by scripts/deps.sh; without it the test ends skipped
// after the other checks, except in CI, where it fails).
func TestSystemdUnit(t *testing.T) {
	const file = "impulse-agent.service"
	u := unit(t, file)
	one := func(k string) string {
		if len(u[k]) != 1 {
			t.Errorf("%s: want one %s, got %q", file, k, u[k])
			return ""
		}
		return u[k][0]
	}
	if r := u["ExecReload"]; len(r) == 0 || r[len(r)-1] != "/bin/kill -HUP $MAINPID" {
		t.Errorf("ExecReload %q: the last must send SIGHUP to $MAINPID", r)
	}
	if s := one("KillSignal"); s != "SIGTERM" {
		t.Errorf("KillSignal %q: the agent drains on SIGTERM", s)
	}
	if d, err := time.ParseDuration(one("TimeoutStopSec")); err != nil || d <= hcl.DefaultDrainTimeout {
		t.Errorf("TimeoutStopSec %q must exceed the default drain_timeout %s", one("TimeoutStopSec"), hcl.DefaultDrainTimeout)
	}
	if user := one("User"); user == "" || user == "root" {
		t.Errorf("User %q: run unprivileged", user)
	}
	if c := one("AmbientCapabilities"); c != "CAP_NET_BIND_SERVICE" {
		t.Errorf("AmbientCapabilities %q, want CAP_NET_BIND_SERVICE alone", c)
	}
	if c := one("CapabilityBoundingSet"); c != "CAP_NET_BIND_SERVICE" {
		t.Errorf("CapabilityBoundingSet %q, want CAP_NET_BIND_SERVICE alone", c)
	}
	start := strings.Fields(one("ExecStart"))
	for _, pre := range append(u["ExecStartPre"], u["ExecReload"][:len(u["ExecReload"])-1]...) {
		f := strings.Fields(pre)
		if len(f) < 2 || f[0] != start[0] || f[1] != "validate" || !slices.Equal(f[2:], start[1:]) {
			t.Errorf("%q: want %s validate with ExecStart's arguments %q", pre, start[0], start[1:])
		}
	}

	analyze := testtool.Need(t, "systemd-analyze", "systemd")
	// verify wants the binaries to exist: stand /bin/true in for the agent.
	src, _ := os.ReadFile(file)
	tmp := filepath.Join(t.TempDir(), file)
	os.WriteFile(tmp, []byte(strings.ReplaceAll(string(src), start[0], "/bin/true")), 0o644)
	if out, err := exec.Command(analyze, "verify", tmp).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

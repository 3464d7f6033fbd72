package consultest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

// binary finds the Consul binary once per test process: $CONSUL_BIN when set,
// otherwise the path printed by scripts/consul.sh, which builds Consul the
// first time (minutes) and then answers from its cache.
var binary = sync.OnceValues(findBinary)

func findBinary() (string, error) {
	if p := os.Getenv("CONSUL_BIN"); p != "" {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("consultest: CONSUL_BIN=%s is not an executable file", p)
		}
		return p, nil
	}
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return "", fmt.Errorf("consultest: cannot locate scripts/consul.sh: runtime.Caller failed")
	}
	script := filepath.Join(filepath.Dir(self), "..", "..", "scripts", "consul.sh")
	unlock, err := lockBuild()
	if err != nil {
		return "", err
	}
	defer unlock()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command("bash", script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("consultest: %s: %w\n%s", script, err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	bin := strings.TrimSpace(lines[len(lines)-1])
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("consultest: %s printed %q: %w", script, bin, err)
	}
	return bin, nil
}

// lockBuild serialises scripts/consul.sh across test binaries (go test runs
// packages in parallel) with an flock in the script's cache directory, so a
// cold cache is built once, not once per package.
func lockBuild() (unlock func(), err error) {
	dir := os.Getenv("IMPULSE_CACHE")
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("consultest: cache dir: %w", err)
		}
		dir = filepath.Join(base, "impulse-agent")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("consultest: cache dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ".consul-build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("consultest: build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("consultest: build lock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

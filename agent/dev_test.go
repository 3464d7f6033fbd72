package agent

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSelfCommand: the -dev "try it" command names the binary itself, or
// `go run` when the binary is one that `go run` built (build cache or a
// temporary go-build directory).
func TestSelfCommand(t *testing.T) {
	repo := t.TempDir()
	os.MkdirAll(filepath.Join(repo, "cmd", "impulse-agent"), 0o755)
	elsewhere := t.TempDir()
	for _, tc := range []struct{ exe, cwd, want string }{
		{"/usr/local/bin/impulse-agent", repo, "/usr/local/bin/impulse-agent"},
		{"/tmp/go-build1234/b001/exe/impulse-agent", repo, "go run ./cmd/impulse-agent"},
		{"/root/.cache/go-build/ab/abcdef-d/impulse-agent", repo, "go run ./cmd/impulse-agent"},
		{"/tmp/go-build1234/b001/exe/impulse-agent", elsewhere, "go run "},
		{"", repo, "impulse-agent"},
	} {
		if got := selfCommand(tc.exe, tc.cwd); !strings.HasPrefix(got, tc.want) || (tc.want == "go run " && got == tc.want) {
			t.Errorf("selfCommand(%q, %q) = %q, want %q...", tc.exe, tc.cwd, got, tc.want)
		}
	}
}

// TestDialable: the "try it" command of a wildcard listener names the
// loopback address the -dev certificate covers.
func TestDialable(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8443": "127.0.0.1:8443",
		"0.0.0.0:8443":   "127.0.0.1:8443",
		"[::]:8443":      "[::1]:8443",
		"[::1]:8443":     "[::1]:8443",
	} {
		addr, err := net.ResolveUDPAddr("udp", in)
		if err != nil {
			t.Fatal(err)
		}
		if got := dialable(addr); got != want {
			t.Errorf("dialable(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestDevCertNames: the -dev certificate names a specific -dev-listen host.
func TestDevCertNames(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:8443":   "localhost 127.0.0.1 ::1",
		"0.0.0.0:8443":     "localhost 127.0.0.1 ::1",
		":8443":            "localhost 127.0.0.1 ::1",
		"127.0.0.2:8443":   "localhost 127.0.0.1 ::1 127.0.0.2",
		"[fd00::1]:8443":   "localhost 127.0.0.1 ::1 fd00::1",
		"gw.internal:8443": "localhost 127.0.0.1 ::1 gw.internal",
	} {
		if got := strings.Join(devCertNames(in), " "); got != want {
			t.Errorf("devCertNames(%q) = %q, want %q", in, got, want)
		}
	}
}

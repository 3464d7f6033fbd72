package e2e

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// Package-wide fixtures, set up by TestMain.
var (
	// agentBin is the impulse-agent binary built for this test run.
	agentBin string
	// cert is the listener certificate every agent of the package serves;
	// certFile and keyFile hold it in PEM.
	cert              *selfsigned.Cert
	certFile, keyFile string
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if name := os.Getenv(backendProcessEnv); name != "" {
		return serveBackendProcess(name) // rolling_test.go: this binary re-run as a backend
	}
	if spec := os.Getenv(r09ProcessEnv); spec != "" {
		return serveR09Process(spec) // r09_backends_test.go
	}
	flag.Parse()
	dir, err := os.MkdirTemp("", "impulse-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	start := time.Now()
	agentBin = filepath.Join(dir, "impulse-agent")
	build := exec.Command("go", "build", "-o", agentBin, "github.com/impulse-agent/impulse-agent/cmd/impulse-agent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building impulse-agent:", err)
		return 1
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "e2e: built %s in %s\n", agentBin, time.Since(start).Round(time.Millisecond))
	}

	if cert, err = selfsigned.New("localhost", "127.0.0.1"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, cert.CertPEM, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := os.WriteFile(keyFile, cert.KeyPEM, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}

	code := m.Run()

	consulMu.Lock()
	if consulStop != nil {
		consulStop(code != 0)
	}
	consulMu.Unlock()
	return code
}

// The package's shared Consul dev agent, started by the first test that
// needs it and stopped by TestMain. Tests sharing it use distinct service
// names; tests that stop or restart Consul start their own with
// consultest.Start.
var (
	consulMu     sync.Mutex
	consulShared *consultest.Agent
	consulStop   func(dumpLog bool)
	consulErr    error
)

func sharedConsul(t *testing.T) *consultest.Agent {
	t.Helper()
	consulMu.Lock()
	defer consulMu.Unlock()
	if consulShared == nil && consulErr == nil {
		start := time.Now()
		consulShared, consulStop, consulErr = consultest.StartMain()
		if consulErr == nil {
			t.Logf("shared consul agent at %s started in %s", consulShared.Addr(), time.Since(start).Round(time.Millisecond))
		}
	}
	if consulErr != nil {
		t.Fatalf("starting the shared consul agent: %v", consulErr)
	}
	return consulShared
}

// Package soak is the soak under faults (issue "Proof under fire", item 2):
// constant mixed load through the built gateway, fed by a real Consul
// agent, while a scripted sequence of faults runs; then the assertions and
// a table. `make soak` runs it for 10 minutes; SOAK=short (the default in
// `make test`) for about 90 s.
package soak

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// agentBin is the impulse-agent binary built (without -race: the load is
// what the soak measures, not the detector) by TestMain.
var agentBin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(backendEnv); spec != "" {
		os.Exit(serveBackend(spec))
	}
	dir, err := os.MkdirTemp("", "impulse-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
	agentBin = filepath.Join(dir, "impulse-agent")
	build := exec.Command("go", "build", "-o", agentBin, "github.com/impulse-agent/impulse-agent/cmd/impulse-agent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak: building impulse-agent:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// gatewayProc is the running gateway process.
type gatewayProc struct {
	cmd     *exec.Cmd
	control string // http://host:port
	addr    string // the listener's host:port (UDP and TCP)
	mu      sync.Mutex
	log     strings.Builder // its whole log (JSON lines)
	exited  chan struct{}
}

// startGateway runs the agent on config file cfg and waits for its control
// and listener addresses; it is stopped when the test ends.
func startGateway(t *testing.T, cfg string) *gatewayProc {
	t.Helper()
	g := &gatewayProc{exited: make(chan struct{})}
	g.cmd = exec.Command(agentBin, "-config="+cfg, "-log-json")
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	g.cmd.Stdout, g.cmd.Stderr = pw, pw
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var once sync.Once
		for sc.Scan() {
			line := sc.Text()
			g.mu.Lock()
			g.log.WriteString(line + "\n")
			var e map[string]any
			if json.Unmarshal([]byte(line), &e) == nil {
				switch e["@message"] {
				case "control API listening":
					g.control = "http://" + e["address"].(string)
				case "listener started":
					g.addr = e["address"].(string)
				case "impulse-agent started":
					once.Do(func() { close(ready) })
				}
			}
			g.mu.Unlock()
		}
	}()
	go func() { _ = g.cmd.Wait(); pw.Close(); close(g.exited) }()
	t.Cleanup(func() {
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.exited:
		case <-time.After(30 * time.Second):
			_ = g.cmd.Process.Kill()
			<-g.exited
		}
		if t.Failed() {
			t.Logf("gateway log (last 60 lines):\n%s", tail(g.logs(), 60))
		}
	})
	select {
	case <-ready:
	case <-g.exited:
		t.Fatalf("gateway exited:\n%s", g.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("gateway did not start:\n%s", g.logs())
	}
	return g
}

func (g *gatewayProc) logs() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

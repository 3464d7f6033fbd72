// Package testproc runs the test binary itself as a helper process (a
// backend to SIGKILL, say): the child sees an environment variable, serves,
// and prints "port N" as its first line. Imported only by tests.
package testproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// Proc is a running helper process.
type Proc struct {
	// Port is the port the child printed.
	Port int
	Cmd  *exec.Cmd
}

// Start re-runs the test binary (os.Args[0]) with env ("NAME=value")
// added, waits for its "port N" line and returns it. The child dies with
// the test process (Pdeathsig) and is killed when the test ends. Errors
// fail the test.
func Start(t testing.TB, env string) *Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{Cmd: cmd}
	t.Cleanup(p.Kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	if _, perr := fmt.Sscanf(line, "port %d", &p.Port); err != nil || perr != nil {
		t.Fatalf("helper process %q: first line %q: %v %v", env, line, err, perr)
	}
	return p
}

// Kill sends SIGKILL and reaps the process (idempotent).
func (p *Proc) Kill() {
	if p.Cmd.ProcessState == nil {
		_ = p.Cmd.Process.Signal(syscall.SIGKILL)
		_ = p.Cmd.Wait()
	}
}

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process started by the harness. Its stdout and stderr lines
// are kept (the last 200) for diagnostics and offered to waitLine.
type child struct {
	name string
	cmd  *exec.Cmd
	PID  int

	mu    sync.Mutex
	tail  []string
	lines chan string   // every output line, while someone may wait
	done  chan struct{} // closed when the process has exited
}

// startChild starts argv, pinned to cpu with taskset when cpu and taskset
// are both non-empty, with extra environment variables added.
func startChild(name, taskset, cpu string, argv []string, extraEnv ...string) (*child, error) {
	if taskset != "" && cpu != "" {
		argv = append([]string{taskset, "-c", cpu}, argv...)
	}
	c := &child{name: name, lines: make(chan string, 4096), done: make(chan struct{})}
	c.cmd = exec.Command(argv[0], argv[1:]...)
	c.cmd.Env = append(os.Environ(), extraEnv...)
	// taskset execs the command, so the PID is the measured process; the
	// child dies with the harness even if the harness is killed.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.PID = c.cmd.Process.Pid
	var wg sync.WaitGroup
	wg.Go(func() { c.scan(stdout) })
	wg.Go(func() { c.scan(stderr) })
	go func() {
		wg.Wait()
		_ = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		c.mu.Lock()
		c.tail = append(c.tail, line)
		if len(c.tail) > 200 {
			c.tail = c.tail[len(c.tail)-200:]
		}
		c.mu.Unlock()
		select {
		case c.lines <- line:
		default: // nobody is reading; the tail keeps it
		}
	}
}

// Output returns the last lines the process printed.
func (c *child) Output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.tail, "\n")
}

// waitLine returns the first line (from now on, or still queued) for which
// match holds.
func (c *child) waitLine(timeout time.Duration, match func(string) bool) (string, error) {
	deadline := time.After(timeout)
	for {
		select {
		case l := <-c.lines:
			if match(l) {
				return l, nil
			}
		case <-c.done:
			// Drain what is queued before giving up.
			for {
				select {
				case l := <-c.lines:
					if match(l) {
						return l, nil
					}
				default:
					return "", fmt.Errorf("%s exited (%v) before it was ready; output:\n%s", c.name, c.cmd.ProcessState, c.Output())
				}
			}
		case <-deadline:
			return "", fmt.Errorf("%s not ready after %s; output:\n%s", c.name, timeout, c.Output())
		}
	}
}

// waitJSON returns the first stdout/stderr line that is a JSON object with
// the key want, decoded.
func (c *child) waitJSON(timeout time.Duration, want string) (map[string]any, error) {
	var m map[string]any
	_, err := c.waitLine(timeout, func(l string) bool {
		m = nil
		if json.Unmarshal([]byte(l), &m) != nil {
			return false
		}
		_, ok := m[want]
		return ok
	})
	return m, err
}

// Stop sends SIGTERM and waits up to 5 s, then kills.
func (c *child) Stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// freePort returns a loopback port free for both TCP and UDP (Caddy binds
// both on the same number).
func freePort() (int, error) {
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		ln.Close()
		if err == nil {
			pc.Close()
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free TCP+UDP port on loopback")
}

// decodeLine decodes a JSON object log line.
func decodeLine(l string) (map[string]any, error) {
	var m map[string]any
	err := json.Unmarshal([]byte(l), &m)
	return m, err
}

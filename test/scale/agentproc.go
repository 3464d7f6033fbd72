package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// buildAgent builds cmd/impulse-agent into dir.
func buildAgent(dir string) (string, error) {
	bin := filepath.Join(dir, "impulse-agent")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/impulse-agent/impulse-agent/cmd/impulse-agent")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building impulse-agent: %w", err)
	}
	return bin, nil
}

// agentConfig is one upstream per service, fed by Consul through the proxy.
// The control API serves /debug/pprof/ (enable_debug) so that the churn's
// samples can force a collection (procstats.go).
func agentConfig(o options, consulAddr, certFile, keyFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `drain_timeout = "2s"

consul {
  address = %q
  wait    = %q
}

control {
  address      = "127.0.0.1:0"
  enable_debug = true
}

listener "public" {
  address = "127.0.0.1:0"
  tls {
    cert_file = %q
    key_file  = %q
  }
}
`, consulAddr, o.wait.String(), certFile, keyFile)
	for i := range o.services {
		name := serviceName(i)
		fmt.Fprintf(&b, `
upstream %q {
  route {
    host        = "%s.test"
    path_prefix = "/"
  }
  consul {
    service = %q
    scheme  = "http"
  }
}
`, name, name, name)
	}
	return b.String()
}

func writeCert(dir string) (cert *selfsigned.Cert, certFile, keyFile string, err error) {
	if cert, err = selfsigned.New("localhost", "127.0.0.1"); err != nil {
		return nil, "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err = os.WriteFile(certFile, cert.CertPEM, 0o644); err == nil {
		err = os.WriteFile(keyFile, cert.KeyPEM, 0o600)
	}
	return cert, certFile, keyFile, err
}

// agentProc is the running impulse-agent.
type agentProc struct {
	cmd        *exec.Cmd
	pid        int
	controlURL string
	listenAddr string
	logPath    string
	exited     chan struct{}
	ctl        *http.Client
	// heapDir, when set, keeps the heap profile of each forced collection
	// (-heap-profiles): heap-1.pb.gz, heap-2.pb.gz, ... for `go tool pprof
	// -base`.
	heapDir  string
	heapSeen int
}

// startAgent starts bin with -config=cfgPath -log-json, copies its log to
// logPath and waits for "impulse-agent started" to learn the bound ports.
func startAgent(bin, cfgPath, logPath string) (*agentProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	a := &agentProc{logPath: logPath, exited: make(chan struct{}),
		ctl: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	a.cmd = exec.Command(bin, "-config="+cfgPath, "-log-json")
	pr, pw := io.Pipe()
	a.cmd.Stdout, a.cmd.Stderr = pw, pw
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	a.pid = a.cmd.Process.Pid
	go func() {
		_ = a.cmd.Wait()
		pw.Close()
		close(a.exited)
	}()

	var mu sync.Mutex
	started := make(chan struct{})
	var once sync.Once
	go func() {
		defer logf.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			logf.Write(line)
			logf.Write([]byte{'\n'})
			var m map[string]any
			if json.Unmarshal(line, &m) != nil {
				continue
			}
			addr, _ := m["address"].(string)
			mu.Lock()
			switch m["@message"] {
			case "control API listening":
				a.controlURL = "http://" + addr
			case "listener started":
				if a.listenAddr == "" {
					a.listenAddr = addr
				}
			case "impulse-agent started":
				once.Do(func() { close(started) })
			}
			mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case <-started:
	case <-a.exited:
		return nil, fmt.Errorf("impulse-agent exited during startup; log %s:\n%s", logPath, tail(logPath))
	case <-time.After(60 * time.Second):
		a.stop()
		return nil, fmt.Errorf("impulse-agent did not start within 60s; log %s:\n%s", logPath, tail(logPath))
	}
	mu.Lock()
	defer mu.Unlock()
	if a.controlURL == "" || a.listenAddr == "" {
		a.stop()
		return nil, errors.New("impulse-agent started without logging its control and listener addresses")
	}
	return a, nil
}

func (a *agentProc) stop() {
	select {
	case <-a.exited:
		return
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(20 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

func (a *agentProc) alive() bool {
	select {
	case <-a.exited:
		return false
	default:
		return true
	}
}

// upstreamInfo is the part of GET /v1/upstreams the benchmark reads.
type upstreamInfo struct {
	Name     string   `json:"name"`
	Backends []string `json:"backends"`
	Pending  bool     `json:"discovery_pending"`
}

func (a *agentProc) upstreams() ([]upstreamInfo, error) {
	resp, err := a.ctl.Get(a.controlURL + "/v1/upstreams")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/upstreams: %s", resp.Status)
	}
	var out []upstreamInfo
	return out, json.NewDecoder(resp.Body).Decode(&out)
}

func (a *agentProc) ready() bool {
	resp, err := a.ctl.Get(a.controlURL + "/v1/ready")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 8<<10 {
		b = b[len(b)-8<<10:]
	}
	return string(b)
}

// processCPU returns utime+stime of pid in seconds (/proc/PID/stat; USER_HZ
// is 100 on every Linux architecture, so the resolution is 10 ms).
func processCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return float64(u+s) / 100
}

// childPID finds the child process of this process whose command name starts
// with prefix (the Consul agent consultest started), or 0.
func childPID(prefix string) int {
	self := os.Getpid()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(s[close+1:])
		if len(f) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == self && strings.HasPrefix(s[open+1:close], prefix) {
			return pid
		}
	}
	return 0
}

// freeTCP returns a listener on a kernel-chosen loopback port.
func freeTCP() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

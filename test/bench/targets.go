package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// Target keys, in table order.
const (
	keyDirect    = "direct"
	keyDirectTLS = "direct-tls"
	keyBare      = "bare"
	keyAgentH1   = "agent-h1"
	keyAgentH2   = "agent-h2"
	keyAgentBase = "agent-base"
	keyCaddy     = "caddy"
	keyCaddyDeb  = "caddy-deb"
	keyTraefik   = "traefik"
)

// targetLabels are the row labels of the target keys; newEnv puts the
// versions of the Caddy and Traefik binaries in theirs.
var targetLabels = map[string]string{
	keyDirect:    "backend direct (h1)",
	keyDirectTLS: "Go net/http TLS direct",
	keyBare:      "bare quic-go h3",
	keyAgentH1:   "impulse-agent → h1",
	keyAgentH2:   "impulse-agent → h2/TLS",
	keyAgentBase: "impulse-agent base → h1",
	keyCaddy:     "caddy → h1",
	keyCaddyDeb:  "caddy (Debian) → h1",
	keyTraefik:   "traefik → h1",
}

// server is a running server under test.
type server struct {
	Key   string
	Proto string // what the load generator speaks to it
	Base  string // scheme://host:port
	// control is the agent's control API address (pprof is on it), or "".
	control string
	proc    *child
}

// PID is the process whose CPU and memory are measured.
func (s *server) PID() int { return s.proc.PID }

// env is what the harness shares between its phases: binaries, the
// certificate files, the CPU placement and the running processes.
type env struct {
	dir               string
	benchBin          string
	agentBin          string
	agentBaseBin      string // the previous build of the agent, or ""
	caddyBin          string // Caddy built by scripts/caddy.sh, or ""
	caddyDebBin       string // Debian's Caddy, or ""
	traefikBin        string
	h2loadBin         string
	certFile, keyFile string
	taskset           string // path, or "" when not pinning
	sutCPU, auxCPU    string // the core of the server under test; of the rest
	backendH1         string // shared backend addresses (on auxCPU)
	backendH2         string
	children          []*child
	// loadWarning is the first quic-go UDP buffer warning a load
	// generator printed.
	loadWarning string
}

// start starts a child and remembers it for stopAll.
func (e *env) start(name, cpu string, argv []string, extraEnv ...string) (*child, error) {
	c, err := startChild(name, e.taskset, cpu, argv, extraEnv...)
	if err != nil {
		return nil, err
	}
	e.children = append(e.children, c)
	return c, nil
}

// stopAll stops every child still running.
func (e *env) stopAll() {
	for _, c := range e.children {
		c.Stop()
	}
}

// startBackend starts `bench backend` on cpu with an HTTP/1.1 and/or an
// HTTP/2-over-TLS listener and returns it with its bound addresses.
func (e *env) startBackend(name, cpu string, h1, h2 bool) (*child, map[string]any, error) {
	addr := func(on bool) string {
		if on {
			return "127.0.0.1:0"
		}
		return ""
	}
	c, err := e.start(name, cpu, []string{e.benchBin, "backend", "-cert", e.certFile, "-key", e.keyFile,
		"-h1", addr(h1), "-h2", addr(h2)})
	if err != nil {
		return nil, nil, err
	}
	key := "h1"
	if !h1 {
		key = "h2"
	}
	m, err := c.waitJSON(10*time.Second, key)
	return c, m, err
}

// startDirect starts a dedicated HTTP/1.1 backend on the server core: the
// "backend direct" row.
func (e *env) startDirect() (*server, error) {
	c, m, err := e.startBackend("backend-direct", e.sutCPU, true, false)
	if err != nil {
		return nil, err
	}
	return &server{Key: keyDirect, Proto: "h1", Base: "http://" + m["h1"].(string), proc: c}, nil
}

// startDirectTLS starts a dedicated backend on the server core serving
// HTTP/2 and HTTP/1.1 over TLS (ALPN): the ceiling of the TCP section.
func (e *env) startDirectTLS() (*server, error) {
	c, m, err := e.startBackend("backend-direct-tls", e.sutCPU, false, true)
	if err != nil {
		return nil, err
	}
	return e.ready(&server{Key: keyDirectTLS, Proto: "h2", Base: "https://" + m["h2"].(string), proc: c})
}

// startBare starts the bare quic-go HTTP/3 server on the server core.
func (e *env) startBare() (*server, error) {
	c, err := e.start("bare", e.sutCPU, []string{e.benchBin, "bare", "-cert", e.certFile, "-key", e.keyFile})
	if err != nil {
		return nil, err
	}
	m, err := c.waitJSON(10*time.Second, "h3")
	if err != nil {
		return nil, err
	}
	return e.ready(&server{Key: keyBare, Proto: "h3", Base: "https://" + m["h3"].(string), proc: c})
}

// agentHCL is the agent configuration: one listener (HTTP/3, and HTTP/1.1 and HTTP/2 over TLS on the same port where the build has the TCP ingress) and the control
// API on kernel-chosen loopback ports, every path routed to backendURL
// (http:// = HTTP/1.1, https:// = HTTP/2 over TLS trusting the bench
// certificate).
func (e *env) agentHCL(backendURL string) string {
	tlsBlock := ""
	if strings.HasPrefix(backendURL, "https://") {
		tlsBlock = fmt.Sprintf("  tls {\n    ca_file = %q\n  }\n", e.certFile)
	}
	return fmt.Sprintf(`drain_timeout = "2s"

control {
  address      = "127.0.0.1:0"
  enable_debug = true
}

listener "bench" {
  address = "127.0.0.1:0"
  tls {
    cert_file = %q
    key_file  = %q
  }
}

upstream "bench" {
  route {
    path_prefix = "/"
  }
  backend "b" {
    address = %q
  }
%s}
`, e.certFile, e.keyFile, backendURL, tlsBlock)
}

// startAgent starts impulse-agent on the server core, proxying to the
// shared backend over h1 or h2.
func (e *env) startAgent(key string) (*server, error) {
	backendURL := "http://" + e.backendH1
	if key == keyAgentH2 {
		backendURL = "https://" + e.backendH2
	}
	bin := e.agentBin
	if key == keyAgentBase {
		bin = e.agentBaseBin
	}
	cfgFile := filepath.Join(e.dir, key+".hcl")
	if err := os.WriteFile(cfgFile, []byte(e.agentHCL(backendURL)), 0o644); err != nil {
		return nil, err
	}
	c, err := e.start(key, e.sutCPU, []string{bin, "-config=" + cfgFile, "-log-json"})
	if err != nil {
		return nil, err
	}
	var addr, control string
	_, err = c.waitLine(15*time.Second, func(l string) bool {
		m, _ := decodeLine(l)
		switch {
		case strings.Contains(l, `"listener started"`) && addr == "":
			addr, _ = m["address"].(string)
		case strings.Contains(l, `"control API listening"`):
			control, _ = m["address"].(string)
		}
		return addr != "" && strings.Contains(l, `"impulse-agent started"`)
	})
	if err != nil {
		return nil, err
	}
	return e.ready(&server{Key: key, Proto: "h3", Base: "https://" + addr, control: control, proc: c})
}

// caddyfile is the Caddy configuration: HTTP/3 on (protocols h1 h2 h3),
// the bench certificate, no admin endpoint, no redirects, a reverse proxy to
// the shared HTTP/1.1 backend.
func (e *env) caddyfile(port int) string {
	return fmt.Sprintf(`{
	admin off
	auto_https disable_redirects
	skip_install_trust
	servers {
		protocols h1 h2 h3
	}
}

https://127.0.0.1:%d {
	bind 127.0.0.1
	tls %s %s
	reverse_proxy %s
}
`, port, e.certFile, e.keyFile, e.backendH1)
}

// startCaddy starts Caddy (key keyCaddy or keyCaddyDeb) on the server core.
func (e *env) startCaddy(key string) (*server, error) {
	bin := e.caddyBin
	if key == keyCaddyDeb {
		bin = e.caddyDebBin
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	file := filepath.Join(e.dir, key+".Caddyfile")
	if err := os.WriteFile(file, []byte(e.caddyfile(port)), 0o644); err != nil {
		return nil, err
	}
	home := filepath.Join(e.dir, key+"-home")
	c, err := e.start(key, e.sutCPU, []string{bin, "run", "--config", file, "--adapter", "caddyfile"},
		"HOME="+home, "XDG_DATA_HOME="+home, "XDG_CONFIG_HOME="+home)
	if err != nil {
		return nil, err
	}
	return e.ready(&server{Key: key, Proto: "h3", Base: fmt.Sprintf("https://127.0.0.1:%d", port), proc: c})
}

// startServer starts the server of key.
func (e *env) startServer(key string) (*server, error) {
	switch key {
	case keyDirect:
		return e.startDirect()
	case keyBare:
		return e.startBare()
	case keyAgentH1, keyAgentH2:
		return e.startAgent(key)
	case keyDirectTLS:
		return e.startDirectTLS()
	case keyAgentBase:
		return e.startAgent(key)
	case keyCaddy, keyCaddyDeb:
		return e.startCaddy(key)
	case keyTraefik:
		return e.startTraefik()
	}
	return nil, fmt.Errorf("unknown target %q", key)
}

// ready waits until GET /small through s succeeds (the proxies then also
// reach their backend), for at most 20 s.
func (e *env) ready(s *server) (*server, error) {
	cfg := &LoadConfig{Proto: s.Proto, Method: http.MethodGet, URL: s.Base + "/small", CACert: e.certFile,
		Expect: smallSize, Timeout: 2 * time.Second, Streams: 1}
	tc, err := clientTLS(cfg)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(20 * time.Second)
	buf := make([]byte, 4096)
	for {
		rt, release := newRoundTripper(cfg, tc)
		err = exchange(context.Background(), cfg, rt, buf, new(atomic.Int64))
		release()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.proc.done:
			return nil, fmt.Errorf("%s exited: %v; output:\n%s", s.proc.name, s.proc.cmd.ProcessState, s.proc.Output())
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: GET %s/small still failing after 20 s: %v; output:\n%s", s.proc.name, s.Base, err, s.proc.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

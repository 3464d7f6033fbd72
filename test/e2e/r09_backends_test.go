package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/test/testproc"
)

// r09ProcessEnv, set to "MODE:NAME:PORT", makes the test binary serve as one
// backend process of case R09 (serveR09Process) on loopback port PORT (0:
// any free one): MODE "ok" answers "hello from NAME" with X-Backend: NAME;
// "503" answers 503 to everything; "blackhole" accepts connections and
// reads them, and never answers.
const r09ProcessEnv = "IMPULSE_E2E_R09"

func serveR09Process(spec string) int {
	mode, rest, _ := strings.Cut(spec, ":")
	name, portStr, _ := strings.Cut(rest, ":")
	port, _ := strconv.Atoi(portStr)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "r09 backend:", err)
		return 1
	}
	fmt.Printf("port %d\n", ln.Addr().(*net.TCPAddr).Port)
	if mode == "blackhole" {
		for {
			c, err := ln.Accept()
			if err != nil {
				return 1
			}
			go func() { _, _ = io.Copy(io.Discard, c) }() // reads, never answers
		}
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		if mode == "503" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "hello from "+name)
	})}
	_ = srv.Serve(ln)
	return 1
}

// r09Backend is one backend of an R09 upstream: a process (nil for a port
// nothing listens on) and its port.
type r09Backend struct {
	name string
	port int
	proc *testproc.Proc
}

// startR09Backend starts a backend process of mode on port (0: any).
func startR09Backend(t testing.TB, mode, name string, port int) *r09Backend {
	t.Helper()
	p := testproc.Start(t, fmt.Sprintf("%s=%s:%s:%d", r09ProcessEnv, mode, name, port))
	return &r09Backend{name: name, port: p.Port, proc: p}
}

// refusingBackend is a port that refuses connections: bound, then released.
func refusingBackend(t testing.TB, name string) *r09Backend {
	return &r09Backend{name: name, port: closedPort(t)}
}

func (b *r09Backend) nameURL() (string, string) {
	return b.name, "http://127.0.0.1:" + strconv.Itoa(b.port)
}

// kill ends the backend's process (a port that refuses from then on).
func (b *r09Backend) kill() {
	if b.proc != nil {
		b.proc.Kill()
	}
}

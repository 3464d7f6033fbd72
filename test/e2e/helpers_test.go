package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// ---------------------------------------------------------------------------
// Waiting

// waitFor polls cond every 10 ms until it holds; it fails the test after
// timeout, naming what it waited for.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// Configuration

// baseHCL is the part of every test configuration that binds something: the
// control API and one HTTP/3 listener "public", both on kernel-chosen
// loopback ports, with the package certificate. drain_timeout is short so a
// broken drain cannot stall the suite.
func baseHCL() string {
	return fmt.Sprintf(`
drain_timeout = "10s"

control {
  address = "127.0.0.1:0"
}

listener "public" {
  address = "127.0.0.1:0"
  tls {
    cert_file = %q
    key_file  = %q
  }
}
`, certFile, keyFile)
}

// hclBackend is any test backend a static upstream block can name.
type hclBackend interface{ nameURL() (name, url string) }

func (b *backend) nameURL() (string, string) { return b.Name, b.URL }

// staticUpstreamHCL is an upstream named name routing pathPrefix to the given
// backends (static). extra is pasted into the upstream block.
func staticUpstreamHCL[B hclBackend](name, pathPrefix string, extra string, backends ...B) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nupstream %q {\n  route {\n    path_prefix = %q\n  }\n", name, pathPrefix)
	for _, be := range backends {
		n, u := be.nameURL()
		fmt.Fprintf(&b, "  backend %q {\n    address = %q\n  }\n", n, u)
	}
	if extra != "" {
		b.WriteString(extra)
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// tlsHCL is an upstream tls block trusting the httptest TLS certificate.
func tlsHCL(caFile string) string {
	return fmt.Sprintf("  tls {\n    ca_file = %q\n  }\n", caFile)
}

// ---------------------------------------------------------------------------
// The agent process

// logBuffer collects the agent's stderr and parses its JSON log lines.
type logBuffer struct {
	mu      sync.Mutex
	raw     bytes.Buffer
	partial []byte
	entries []map[string]any
	changed chan struct{} // closed and replaced on every new line
}

func newLogBuffer() *logBuffer { return &logBuffer{changed: make(chan struct{})} }

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raw.Write(p)
	l.partial = append(l.partial, p...)
	added := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := l.partial[:i]
		var m map[string]any
		if json.Unmarshal(line, &m) == nil {
			l.entries = append(l.entries, m)
		}
		l.partial = l.partial[i+1:]
		added = true
	}
	if added {
		close(l.changed)
		l.changed = make(chan struct{})
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.raw.String()
}

// find returns the first entry with @message msg for which match (if any)
// holds, and a channel closed when more lines arrive.
func (l *logBuffer) find(msg string, match func(map[string]any) bool) (map[string]any, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if e["@message"] == msg && (match == nil || match(e)) {
			return e, nil
		}
	}
	return nil, l.changed
}

func (l *logBuffer) all(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, e := range l.entries {
		if e["@message"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// agentProc is one impulse-agent child process.
type agentProc struct {
	t          testing.TB
	cmd        *exec.Cmd
	PID        int
	ConfigPath string // "" for -dev
	// Listeners maps listener name to its bound UDP address; ListenAddr and
	// BaseURL are those of the first listener logged.
	Listeners  map[string]string
	ListenAddr string
	BaseURL    string // https://127.0.0.1:PORT
	ControlURL string // http://127.0.0.1:PORT

	logs   *logBuffer
	exited chan struct{} // closed when the process has been waited for
	state  *os.ProcessState

	ctl *http.Client
}

// startAgent writes configHCL (when not empty) into a temporary directory,
// starts the agent binary with -config=FILE -log-json extraArgs..., and waits
// until it logged its control address, its listener(s) and "impulse-agent
// started". The process is stopped (SIGTERM, then SIGKILL) when the test
// ends; its log is printed if the test failed.
func startAgent(t testing.TB, configHCL string, extraArgs ...string) *agentProc {
	t.Helper()
	return startAgentStdout(t, nil, configHCL, extraArgs...)
}

// startAgentStdout is startAgent with the agent's stdout on stdout (an
// *os.File is handed over as is, e.g. a pipe's write end); nil means the
// log buffer, with stderr.
func startAgentStdout(t testing.TB, stdout io.Writer, configHCL string, extraArgs ...string) *agentProc {
	t.Helper()
	a := &agentProc{
		t:         t,
		logs:      newLogBuffer(),
		exited:    make(chan struct{}),
		Listeners: map[string]string{},
		ctl:       &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	var args []string
	if configHCL != "" {
		a.ConfigPath = filepath.Join(t.TempDir(), "agent.hcl")
		if err := os.WriteFile(a.ConfigPath, []byte(configHCL), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-config="+a.ConfigPath)
	}
	args = append(args, "-log-json")
	args = append(args, extraArgs...)
	a.cmd = exec.Command(agentBin, args...)
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	if stdout != nil {
		a.cmd.Stdout = stdout
	}
	// Never outlive the test process, even if it is killed.
	a.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := a.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", agentBin, err)
	}
	a.PID = a.cmd.Process.Pid
	go func() {
		_ = a.cmd.Wait()
		a.state = a.cmd.ProcessState
		close(a.exited)
	}()
	t.Cleanup(func() { a.cleanup() })

	started := a.waitLog(15*time.Second, "impulse-agent started", nil)
	if started == nil {
		t.Fatalf("agent did not start")
	}
	ctl, _ := a.logs.find("control API listening", nil)
	if ctl == nil {
		t.Fatalf("no \"control API listening\" log line")
	}
	a.ControlURL = "http://" + ctl["address"].(string)
	for _, e := range a.logs.all("listener started") {
		name, _ := e["listener"].(string)
		addr, _ := e["address"].(string)
		a.Listeners[name] = addr
		if a.ListenAddr == "" {
			a.ListenAddr = addr
		}
	}
	if a.ListenAddr == "" {
		t.Fatalf("no \"listener started\" log line")
	}
	a.BaseURL = "https://" + a.ListenAddr
	return a
}

// cleanup stops the process if the test did not, and checks it is gone.
func (a *agentProc) cleanup() {
	t := a.t
	select {
	case <-a.exited:
	default:
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-a.exited:
			if code := a.state.ExitCode(); code != 0 && !t.Failed() {
				t.Errorf("agent (pid %d) exited with code %d on SIGTERM at test end", a.PID, code)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("agent (pid %d) did not exit 20s after SIGTERM; killing it", a.PID)
			_ = a.cmd.Process.Kill()
			<-a.exited
		}
	}
	// The process has been reaped: its PID must be gone (no leak).
	if err := syscall.Kill(a.PID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("agent pid %d still exists after exit (kill -0: %v)", a.PID, err)
	}
	if t.Failed() {
		t.Logf("agent (pid %d) log:\n%s", a.PID, a.logs.String())
	}
}

// URL returns BaseURL + path.
func (a *agentProc) URL(path string) string { return a.BaseURL + path }

// Signal sends sig to the agent.
func (a *agentProc) Signal(sig os.Signal) {
	a.t.Helper()
	if err := a.cmd.Process.Signal(sig); err != nil {
		a.t.Fatalf("signal %v to agent: %v", sig, err)
	}
}

// WaitExit waits up to timeout for the process to exit and returns its exit
// code; it fails the test on timeout.
func (a *agentProc) WaitExit(timeout time.Duration) int {
	a.t.Helper()
	select {
	case <-a.exited:
		return a.state.ExitCode()
	case <-time.After(timeout):
		a.t.Fatalf("agent (pid %d) still running after %s", a.PID, timeout)
		return -1
	}
}

// Exited reports whether the process has exited.
func (a *agentProc) Exited() bool {
	select {
	case <-a.exited:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, waits for the exit and fails the test unless the exit
// code is 0.
func (a *agentProc) Stop() {
	a.t.Helper()
	a.Signal(syscall.SIGTERM)
	if code := a.WaitExit(20 * time.Second); code != 0 {
		a.t.Errorf("agent exited with code %d after SIGTERM, want 0", code)
	}
}

// Logs returns everything the agent wrote so far.
func (a *agentProc) Logs() string { return a.logs.String() }

// waitLog waits for a JSON log line with @message msg (and match, if any)
// and returns it; nil (after failing the test) on timeout or process exit.
func (a *agentProc) waitLog(timeout time.Duration, msg string, match func(map[string]any) bool) map[string]any {
	a.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		e, more := a.logs.find(msg, match)
		if e != nil {
			return e
		}
		select {
		case <-more:
		case <-a.exited:
			if e, _ := a.logs.find(msg, match); e != nil {
				return e
			}
			a.t.Fatalf("agent exited (code %d) before logging %q", a.state.ExitCode(), msg)
			return nil
		case <-deadline.C:
			a.t.Fatalf("agent did not log %q within %s", msg, timeout)
			return nil
		}
	}
}

// control performs a control API request and returns status and body.
func (a *agentProc) control(method, path string, body io.Reader) (int, []byte) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.ControlURL+path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	resp, err := a.ctl.Do(req)
	if err != nil {
		a.t.Fatalf("control %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatalf("control %s %s: reading body: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// readyStatus returns the /v1/ready status code and decoded body.
func (a *agentProc) readyStatus() (int, readyBody) {
	a.t.Helper()
	code, b := a.control("GET", "/v1/ready", nil)
	var r readyBody
	if err := json.Unmarshal(b, &r); err != nil {
		a.t.Fatalf("/v1/ready: %v in %q", err, b)
	}
	return code, r
}

type readyBody struct {
	Ready    bool     `json:"ready"`
	Status   string   `json:"status"`
	Reasons  []string `json:"reasons"`
	Degraded []string `json:"degraded"`
}

// backendInfo is one element of /v1/backends.
type backendInfo struct {
	ID         string `json:"id"`
	Upstream   string `json:"upstream"`
	Source     string `json:"source"`
	Address    string `json:"address"`
	Protocol   string `json:"protocol"`
	Membership string `json:"membership"`
	InFlight   int64  `json:"in_flight"`
	Requests   uint64 `json:"requests"`
}

func (a *agentProc) backends() []backendInfo {
	a.t.Helper()
	code, b := a.control("GET", "/v1/backends", nil)
	if code != http.StatusOK {
		a.t.Fatalf("/v1/backends: %d %s", code, b)
	}
	var out []backendInfo
	if err := json.Unmarshal(b, &out); err != nil {
		a.t.Fatalf("/v1/backends: %v in %s", err, b)
	}
	return out
}

// backendIDs returns the ids of the members of upstream, as the control API
// lists them; backends still draining after their removal (membership
// "removed") are left out.
func (a *agentProc) backendIDs(upstream string) []string {
	var ids []string
	for _, b := range a.backends() {
		if b.Upstream == upstream && b.Membership != "removed" {
			ids = append(ids, b.ID)
		}
	}
	return ids
}

// vmStatus returns a /proc/PID/status field ("VmRSS", "VmHWM") in bytes.
func vmStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		fields := strings.Fields(rest) // "12345 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%s: unexpected %q", field, rest)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		return kb << 10, err
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// ---------------------------------------------------------------------------
// HTTP/3 client

// newH3Client returns an HTTP/3 client trusting the package certificate; its
// transport is closed when the test ends.
func newH3Client(t testing.TB) (*http.Client, *http3.Transport) {
	return newH3ClientWithRoots(t, cert.Pool)
}

// newH3ClientWithRoots is newH3Client trusting roots instead.
func newH3ClientWithRoots(t testing.TB, roots *x509.CertPool) (*http.Client, *http3.Transport) {
	tr := &http3.Transport{
		TLSClientConfig:    &tls.Config{RootCAs: roots},
		DisableCompression: true,
	}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}, tr
}

// result is one HTTP/3 exchange with its body read completely.
type result struct {
	Status int
	Header http.Header
	Body   string
}

// get performs a GET and reads the whole body.
func get(c *http.Client, url string) (result, error) {
	resp, err := c.Get(url)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{Status: resp.StatusCode, Header: resp.Header, Body: string(b)}, err
}

// mustGet is get that fails the test on a transport error.
func mustGet(t testing.TB, c *http.Client, url string) result {
	t.Helper()
	r, err := get(c, url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return r
}

// ---------------------------------------------------------------------------
// Backends

// backend is a real HTTP/1.1 (httptest.NewServer) or HTTP/2-over-TLS
// (EnableHTTP2 + StartTLS) server that answers with its name and counts
// hits. The last path segment selects a behaviour (so /h2/bytes is /bytes):
//
//	/bytes?size=N[&chunked=1]      N pattern bytes (see patternReader)
//	/upload                        reads the body: "bytes=N sha256=HEX"
//	/slow?first=N&total=M&sleep=D  N bytes, flush, sleep D, the rest; Content-Length M
//	/stall?sleep=D                 no headers for D (or until the request is canceled)
//	/truncate?cl=1                 64 KiB of a declared 1 MiB body (cl=1: Content-Length, else chunked), then abort
//	/reset                         abort the connection before any response
//	anything else                  "hello from NAME"
type backend struct {
	Name   string
	URL    string // http://127.0.0.1:P or https://127.0.0.1:P
	Host   string
	Port   int
	CAFile string // PEM of the TLS certificate (HTTP/2 backends)

	srv      *httptest.Server
	uploads  chan string // outcomes of /upload, see uploadOutcome
	hits     atomic.Int64
	firstHit atomic.Int64 // unix nanoseconds of the first request, 0 before
	lastHit  atomic.Int64 // unix nanoseconds of the latest request
}

func newHTTP1Backend(t testing.TB, name string) *backend {
	b := &backend{Name: name, uploads: make(chan string, 1)}
	b.srv = httptest.NewServer(b.handler())
	b.init(t)
	return b
}

func newH2Backend(t testing.TB, name string) *backend {
	b := &backend{Name: name, uploads: make(chan string, 1)}
	b.srv = httptest.NewUnstartedServer(b.handler())
	b.srv.EnableHTTP2 = true
	b.srv.StartTLS()
	b.CAFile = filepath.Join(t.TempDir(), name+"-ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.srv.Certificate().Raw})
	if err := os.WriteFile(b.CAFile, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	b.init(t)
	return b
}

func (b *backend) init(t testing.TB) {
	b.URL = b.srv.URL
	addr := b.srv.Listener.Addr().(*net.TCPAddr)
	b.Host, b.Port = addr.IP.String(), addr.Port
	t.Cleanup(b.srv.Close)
}

// uploadOutcome records how an /upload ended ("bytes=N sha256=X" or
// "error ..."), for tests that read Uploads.
func (b *backend) uploadOutcome(s string) {
	select {
	case b.uploads <- s:
	default: // nobody is looking
	}
}

// Hits is the number of requests the backend received.
func (b *backend) Hits() int64 { return b.hits.Load() }

func (b *backend) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().UnixNano()
		b.hits.Add(1)
		b.firstHit.CompareAndSwap(0, now)
		b.lastHit.Store(now)
		w.Header().Set("X-Backend", b.Name)
		q := r.URL.Query()
		// Dispatch on the last path segment, so any route prefix reaches
		// the behaviour: /h2/bytes is /bytes.
		switch "/" + path.Base(r.URL.Path) {
		case "/bytes":
			size, _ := strconv.ParseInt(q.Get("size"), 10, 64)
			if q.Get("chunked") == "" {
				w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
			}
			buf := make([]byte, 64<<10)
			_, _ = io.CopyBuffer(w, newPatternReader(size), buf)
		case "/upload":
			h := sha256.New()
			n, err := io.Copy(h, r.Body)
			if err != nil {
				b.uploadOutcome(fmt.Sprintf("error after %d bytes: %v", n, err))
				http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
				return
			}
			sum := fmt.Sprintf("bytes=%d sha256=%s", n, hex.EncodeToString(h.Sum(nil)))
			b.uploadOutcome(sum)
			fmt.Fprint(w, sum)
		case "/slow":
			first, _ := strconv.ParseInt(q.Get("first"), 10, 64)
			total, _ := strconv.ParseInt(q.Get("total"), 10, 64)
			sleep, _ := time.ParseDuration(q.Get("sleep"))
			w.Header().Set("Content-Length", strconv.FormatInt(total, 10))
			pr := newPatternReader(total)
			_, _ = io.CopyN(w, pr, first)
			w.(http.Flusher).Flush()
			time.Sleep(sleep)
			_, _ = io.Copy(w, pr)
		case "/stall":
			sleep, _ := time.ParseDuration(q.Get("sleep"))
			select {
			case <-time.After(sleep):
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, "hello from %s (late)\n", b.Name)
		case "/truncate":
			if q.Get("cl") != "" {
				w.Header().Set("Content-Length", strconv.Itoa(1<<20))
			}
			_, _ = io.CopyN(w, newPatternReader(1<<20), 64<<10)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "/reset":
			panic(http.ErrAbortHandler)
		default:
			_, _ = io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "hello from %s\n", b.Name)
		}
	})
}

// closedPort returns a loopback TCP port that nothing listens on (it was
// bound and released; good enough on loopback for the duration of a test).
func closedPort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return p
}

// refusingPort returns a loopback port that refuses connections until the
// test ends: a socket bound and never listening holds it, so a connect gets
// RST and no listener of this or another test can take it meanwhile (a port
// closed at once, as closedPort's, was taken by another agent's control
// API: a 404 where a 502 was due). closedPort is for a port a backend takes
// later.
func refusingPort(t testing.TB) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "refusing-port") // closes fd
	t.Cleanup(func() { f.Close() })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return sa.(*syscall.SockaddrInet4).Port
}

// ---------------------------------------------------------------------------
// Deterministic payloads

const patBlock = 64 << 10

// patBase is a fixed pseudo-random block; block i of a pattern stream is
// patBase with its first 8 bytes replaced by i, so lost, duplicated or
// reordered blocks change the hash.
var patBase = func() []byte {
	r := rand.New(rand.NewPCG(0x1b9d15e, 42))
	b := make([]byte, patBlock)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}()

// patternReader yields the first n bytes of the pattern stream.
type patternReader struct {
	remaining, off int64
	cur            []byte
	curIdx         int64
}

func newPatternReader(n int64) *patternReader {
	return &patternReader{remaining: n, cur: make([]byte, patBlock), curIdx: -1}
}

func (p *patternReader) Read(b []byte) (int, error) {
	if p.remaining <= 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(b) && p.remaining > 0 {
		if idx := p.off / patBlock; idx != p.curIdx {
			copy(p.cur, patBase)
			binary.LittleEndian.PutUint64(p.cur, uint64(idx))
			p.curIdx = idx
		}
		c := copy(b[n:], p.cur[p.off%patBlock:])
		if int64(c) > p.remaining {
			c = int(p.remaining)
		}
		n += c
		p.off += int64(c)
		p.remaining -= int64(c)
	}
	return n, nil
}

var patternSums sync.Map // int64 → string

// patternSHA256 is the hex SHA-256 of the first n pattern bytes.
func patternSHA256(n int64) string {
	if s, ok := patternSums.Load(n); ok {
		return s.(string)
	}
	h := sha256.New()
	_, _ = io.CopyBuffer(h, newPatternReader(n), make([]byte, patBlock))
	s := hex.EncodeToString(h.Sum(nil))
	patternSums.Store(n, s)
	return s
}

// countingHash is an io.Writer that hashes (SHA-256) and counts.
type countingHash struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n int64
}

func newCountingHash() *countingHash { return &countingHash{h: sha256.New()} }

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

func (c *countingHash) Sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// ctxTimeout is context.WithTimeout tied to the test's lifetime.
func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

const MiB = 1 << 20

func errorsAs[T error](err error, target *T) bool { return errors.As(err, target) }

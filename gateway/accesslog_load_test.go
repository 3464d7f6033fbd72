package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/impulse-agent/impulse-agent/internal/testtool"
)

// applyKeepingListener applies cfg to h's gateway with the harness's own
// listener, so that its sockets stay.
func (h *harness) applyKeepingListener(cfg Config) error {
	cfg.Listeners = []ListenerConfig{{Name: "test", Address: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{h.cert.TLS}}}}
	return h.gw.Apply(context.Background(), cfg)
}

// getOK GETs path and fails the test unless the answer is a 200.
func (h *harness) getOK(c *http.Client, path string) error {
	resp, err := c.Get(h.base + path)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %d", path, resp.StatusCode)
	}
	return nil
}

// closeClient closes c's connections and, for HTTP/3, its UDP socket.
func closeClient(c *http.Client) {
	c.CloseIdleConnections()
	if cl, ok := c.Transport.(io.Closer); ok {
		cl.Close()
	}
}

// fileLines parses the JSON lines of the files (a missing one has none).
func fileLines(t *testing.T, paths ...string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		out = append(out, parseLines(t, string(b))...)
	}
	return out
}

// TestAccessLogAgreesWithMetrics: for the same mixed traffic over every
// ingress (relayed 200s and 500s, the gateway's 404, 502 and 503, a client
// that leaves: 499) the access log and impulse_requests count the same
// requests per protocol, status class and reason.
func TestAccessLogAgreesWithMetrics(t *testing.T) {
	arrived := make(chan struct{}, 1)
	backend := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok/fail":
			w.WriteHeader(500)
		case "/ok/slow":
			arrived <- struct{}{}
			<-r.Context().Done()
		default:
			io.WriteString(w, "ok")
		}
	}))
	closed := testbackend.NewH1(t, http.NotFoundHandler())
	down := staticUpstream("down", "/down", closed)
	closed.Close() // connect fails: 502
	empty := staticUpstream("empty", "/empty")
	m, msink := inmemMetrics()
	h, sink := loggedHarness(t, ProtocolH3, accesslog.Config{}, m, staticUpstream("web", "/ok", backend), down, empty)
	total := 0
	for _, proto := range protocols {
		c := &http.Client{Transport: clientTransport(proto, &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"})}
		for _, path := range []string{"/ok", "/ok", "/ok/fail", "/nowhere", "/down", "/empty", "/ok"} {
			resp, err := c.Get(h.base + path)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			total++
		}
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", h.base+"/ok/slow", nil)
		done := make(chan error, 1)
		go func() {
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			done <- err
		}()
		waitFor(t, arrived, "the slow request at the backend")
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("the canceled request: %v", err)
		}
		total++
		closeClient(c)
	}
	lines := sink.wait(t, total)
	fromLog := map[string]float64{}
	for _, l := range lines {
		fromLog[fmt.Sprintf("%s/%s/%s", l["protocol"], observe.StatusClass(int(l["status"].(float64))), l["reason"])]++
	}
	fromMetrics := map[string]float64{}
	h.gw.FlushMetrics()
	for _, iv := range msink.Data() {
		for _, c := range iv.Counters {
			if c.Name != "impulse.requests" {
				continue
			}
			lb := map[string]string{}
			for _, l := range c.Labels {
				lb[l.Name] = l.Value
			}
			fromMetrics[fmt.Sprintf("%s/%s/%s", lb["protocol"], lb["code"], lb["reason"])] += c.Sum
		}
	}
	for k, v := range fromMetrics {
		if v == 0 {
			delete(fromMetrics, k)
		}
	}
	if fmt.Sprint(fromLog) != fmt.Sprint(fromMetrics) {
		t.Fatalf("access log %v\nmetrics    %v", fromLog, fromMetrics)
	}
	for _, want := range []string{"h1/4xx/client_canceled", "h3/5xx/", "h2/4xx/no_route", "h1/5xx/backend_connect_failed", "h2/5xx/no_healthy_backend"} {
		found := false
		for k := range fromLog {
			found = found || strings.HasPrefix(k, want)
		}
		if !found {
			t.Errorf("no %s in the traffic: %v", want, fromLog)
		}
	}
}

// TestAccessLogRotationUnderLoad: while clients over every ingress keep
// sending, the file is renamed and reopened (logrotate, then SIGUSR1)
// again and again; every request served is a whole line in one of the
// files or counted in impulse_access_log_dropped, and none is there twice.
func TestAccessLogRotationUnderLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	backend := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	m, msink := inmemMetrics()
	h, _ := loggedHarness(t, ProtocolH2, accesslog.Config{Path: path}, m, staticUpstream("web", "/", backend))
	const clients, each = 6, 150
	var served atomic.Int64
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for i := range clients {
		c := &http.Client{Transport: clientTransport(protocols[i%len(protocols)], &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"})}
		wg.Go(func() {
			defer closeClient(c)
			for range each {
				if err := h.getOK(c, "/"); err != nil {
					errs <- err
					return
				}
				served.Add(1)
			}
		})
	}
	files := []string{path}
	for k := 1; k <= 5; k++ {
		// Each generation gets traffic before it is rotated away.
		eventually(t, 10*time.Second, func() bool {
			fi, err := os.Stat(path)
			return (err == nil && fi.Size() > 0) || served.Load() == clients*each
		}, "lines in the current file")
		rotated := fmt.Sprintf("%s.%d", path, k)
		if err := os.Rename(path, rotated); err != nil {
			t.Fatal(err)
		}
		files = append(files, rotated)
		if err := h.gw.ReopenAccessLog(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var lines []map[string]any
	var dropped float64
	eventually(t, 10*time.Second, func() bool {
		lines = fileLines(t, files...)
		dropped = counterSum(h.gw, msink, "impulse.access_log.dropped", nil)
		return float64(len(lines))+dropped >= float64(served.Load())
	}, "every request logged or counted")
	if float64(len(lines))+dropped != clients*each {
		t.Fatalf("%d lines + %v dropped, %d served", len(lines), dropped, clients*each)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		id := l["request_id"].(string)
		if seen[id] {
			t.Fatalf("request %s logged twice", id)
		}
		seen[id] = true
	}
	used := 0
	for _, f := range files {
		if len(fileLines(t, f)) > 0 {
			used++
		}
	}
	if used < 3 {
		t.Errorf("lines in %d of %d files: the rotations did not take", used, len(files))
	}
}

// mountTmpfs mounts a tmpfs of size (mount(8)'s syntax, "256k") on a
// temporary directory, unmounted at the end of the test. Without root it
// skips, unless CI is set: there it fails.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		if !testtool.CI() && os.Geteuid() != 0 {
			t.Skipf("mounting a tmpfs needs root: %v", err)
		}
		t.Fatalf("mount -t tmpfs -o size=%s tmpfs %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("umount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes to a new file in dir until the filesystem is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return f.Name()
		}
	}
}

// TestAccessLogFullDisk: with the log's filesystem full (a tmpfs) the
// gateway serves every request; the lines it cannot write are counted in
// impulse_access_log_errors; once there is room the lines are whole
// again. Every request is a whole line or counted.
func TestAccessLogFullDisk(t *testing.T) {
	dir := mountTmpfs(t, "256k") // before the harness: unmounted after its shutdown
	path := filepath.Join(dir, "access.log")
	backend := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	m, msink := inmemMetrics()
	h, _ := loggedHarness(t, ProtocolH3, accesslog.Config{Path: path}, m, staticUpstream("web", "/", backend))
	lost := func() float64 {
		return counterSum(h.gw, msink, "impulse.access_log.errors", nil) + counterSum(h.gw, msink, "impulse.access_log.dropped", nil)
	}
	served := 0
	serve := func(n int) {
		for range n {
			if err := h.getOK(h.client, "/"); err != nil {
				t.Fatal(err)
			}
			served++
		}
	}
	serve(5)
	eventually(t, 10*time.Second, func() bool { return len(fileLines(t, path)) == 5 }, "5 lines")
	filler := fill(t, dir)
	serve(40) // ~18 KiB of lines: more than the last page of the file holds
	eventually(t, 10*time.Second, func() bool { return counterSum(h.gw, msink, "impulse.access_log.errors", nil) > 0 }, "write errors counted")
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	serve(5)
	whole := func() int {
		b, _ := os.ReadFile(path)
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "{") && strings.HasSuffix(line, "}") {
				n++
			}
		}
		return n
	}
	eventually(t, 10*time.Second, func() bool { return float64(whole())+lost() == float64(served) }, "every request a whole line or counted")
	b, _ := os.ReadFile(path)
	if !strings.HasSuffix(string(b), "}\n") || whole() < 10 {
		t.Errorf("after the disk had room again: %d whole lines, ending %q", whole(), b[max(0, len(b)-40):])
	}
}

// TestAccessLogWriterFallsBehind: with the writer blocked (its output a
// pipe nobody reads), requests go on being served and the lines that do
// not fit the buffer are counted in impulse_access_log_dropped; once the
// pipe is read, the others arrive.
func TestAccessLogWriterFallsBehind(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	backend := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	m, msink := inmemMetrics()
	read := make(chan string, 1)
	t.Cleanup(func() { pw.Close(); pr.Close() }) // last: the gateway's writer is done by then
	h, _ := loggedHarness(t, ProtocolH2, accesslog.Config{Path: "pipe", Writer: pw, Buffer: 16}, m, staticUpstream("web", "/", backend))
	const n = 400 // ~180 KiB of lines: more than the pipe (64 KiB) and the buffer hold
	var wg sync.WaitGroup
	failed := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for range n / 4 {
				if err := h.getOK(h.client, "/"); err != nil {
					failed <- err
					return
				}
			}
		})
	}
	wg.Wait() // every request answered: none waited for the writer
	close(failed)
	for err := range failed {
		t.Fatal(err)
	}
	dropped := counterSum(h.gw, msink, "impulse.access_log.dropped", nil)
	if dropped == 0 {
		t.Fatal("nothing dropped while the writer was blocked")
	}
	go func() {
		var b strings.Builder
		buf := make([]byte, 64<<10)
		for {
			k, err := pr.Read(buf)
			b.Write(buf[:k])
			if err != nil || float64(strings.Count(b.String(), "\n"))+dropped >= n {
				read <- b.String()
				io.Copy(io.Discard, pr)
				return
			}
		}
	}()
	var got string
	select {
	case got = <-read:
	case <-time.After(10 * time.Second):
		t.Fatal("the buffered lines never arrived")
	}
	if lines := len(parseLines(t, got)); float64(lines)+dropped != n {
		t.Fatalf("%d lines + %v dropped, want %d", lines, dropped, n)
	}
}

// TestAccessLogApply: an Apply opens the same file again (logrotate); a
// new path switches to it; a path that cannot be opened fails the Apply
// and nothing changes; a nil AccessLog turns it off, and on again.
func TestAccessLogApply(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	backend := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	uc := staticUpstream("web", "/", backend)
	h, _ := loggedHarness(t, ProtocolH3, accesslog.Config{Path: a}, nil, uc)
	get := func(path string) {
		t.Helper()
		if err := h.getOK(h.client, path); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(path string, n int) {
		t.Helper()
		eventually(t, 10*time.Second, func() bool { return len(fileLines(t, path)) >= n }, fmt.Sprintf("%d lines in %s", n, filepath.Base(path)))
		if got := len(fileLines(t, path)); got != n {
			t.Fatalf("%d lines in %s, want %d", got, filepath.Base(path), n)
		}
	}
	get("/1")
	expect(a, 1)
	os.Rename(a, a+".1")
	if err := h.applyKeepingListener(Config{Upstreams: []UpstreamConfig{uc}, AccessLog: &accesslog.Config{Path: a}}); err != nil {
		t.Fatal(err)
	}
	get("/2")
	expect(a, 1)
	expect(a+".1", 1)
	if err := h.applyKeepingListener(Config{Upstreams: []UpstreamConfig{uc}, AccessLog: &accesslog.Config{Path: b, Format: accesslog.FormatJSON}}); err != nil {
		t.Fatal(err)
	}
	get("/3")
	expect(b, 1)
	gen := h.gw.Generation()
	var oe *accesslog.OpenError
	err := h.applyKeepingListener(Config{AccessLog: &accesslog.Config{Path: filepath.Join(dir, "missing", "c.log")}})
	if !errors.As(err, &oe) || h.gw.Generation() != gen {
		t.Fatalf("Apply with an unopenable path: %v (generation %d → %d); want *accesslog.OpenError and nothing changed", err, gen, h.gw.Generation())
	}
	get("/4") // the upstream is still there, the log still b
	expect(b, 2)
	if err := h.applyKeepingListener(Config{Upstreams: []UpstreamConfig{uc}}); err != nil {
		t.Fatal(err)
	}
	get("/5")
	if err := h.applyKeepingListener(Config{Upstreams: []UpstreamConfig{uc}, AccessLog: &accesslog.Config{Path: b}}); err != nil {
		t.Fatal(err)
	}
	get("/6")
	expect(b, 3)
	if p := fileLines(t, b)[2]["path"]; p != "/6" {
		t.Errorf("after off and on again, the line is %v; /5 was sent while off", p)
	}
}

package e2e

// End-to-end tests of load balancing, active health checks, passive outlier
// ejection and slow start (cases in /work/shared/cases/balancing-health.md):
// the real agent binary, real HTTP/1.1 and HTTP/2-over-TLS backends, the
// quic-go HTTP/3 client and, for Consul weights, the package's shared Consul.
//
// Helpers of this file are prefixed lb so they cannot clash with the
// package's other files.

import (
	"context"
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
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// ---------------------------------------------------------------------------
// Backends that can be killed, restarted on the same port, and told to fail
// their health check.

// lbBackend is an HTTP/1.1 backend (net/http server on its own listener, so
// it can be killed — listener and every connection closed at once — and
// restarted on the same port) or an HTTP/2-over-TLS backend (httptest with
// EnableHTTP2). Paths, by their last segment:
//
//	/health   the active check: answers healthCode (200 unless set); counts
//	          the protocol it was reached over
//	/cancel   X-Backend, 1 KiB, flush, then waits (up to 30 s) for the
//	          request to be canceled; counts the cancellations it saw
//	/fail     hijacks the connection and closes it before any response
//	          (HTTP/1.1 only)
//	anything  "hello from NAME" with X-Backend: NAME
type lbBackend struct {
	Name   string
	URL    string // http://127.0.0.1:P or https://127.0.0.1:P
	Host   string
	Port   int
	CAFile string // HTTP/2 backends: PEM of the certificate

	healthCode   atomic.Int32
	healthChecks atomic.Int64 // /health requests
	healthH2     atomic.Int64 // of which over HTTP/2
	hits         atomic.Int64 // every other request
	cancelsSeen  atomic.Int64 // /cancel requests whose context ended
	fails        atomic.Int64 // /fail connections closed

	mu  sync.Mutex
	srv *http.Server     // HTTP/1.1; nil while killed
	ts  *httptest.Server // HTTP/2
}

// newLBBackend starts an HTTP/1.1 backend on a kernel-chosen loopback port.
func newLBBackend(t testing.TB, name string) *lbBackend {
	t.Helper()
	b := &lbBackend{Name: name}
	b.healthCode.Store(http.StatusOK)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	b.Host, b.Port = addr.IP.String(), addr.Port
	b.URL = fmt.Sprintf("http://%s", ln.Addr())
	b.serve(ln)
	t.Cleanup(b.kill)
	return b
}

// newLBH2Backend starts an HTTP/2-over-TLS backend (httptest certificate,
// written to CAFile for the upstream's tls.ca_file).
func newLBH2Backend(t testing.TB, name string) *lbBackend {
	t.Helper()
	b := &lbBackend{Name: name}
	b.healthCode.Store(http.StatusOK)
	b.ts = httptest.NewUnstartedServer(b.handler())
	b.ts.EnableHTTP2 = true
	b.ts.StartTLS()
	t.Cleanup(b.ts.Close)
	b.URL = b.ts.URL
	addr := b.ts.Listener.Addr().(*net.TCPAddr)
	b.Host, b.Port = addr.IP.String(), addr.Port
	b.CAFile = filepath.Join(t.TempDir(), name+"-ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.ts.Certificate().Raw})
	if err := os.WriteFile(b.CAFile, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *lbBackend) serve(ln net.Listener) {
	srv := &http.Server{Handler: b.handler(), ReadHeaderTimeout: 10 * time.Second}
	b.mu.Lock()
	b.srv = srv
	b.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
}

// kill closes the listener and every connection, idle or active, at once:
// from then on connects are refused and requests in flight are reset.
func (b *lbBackend) kill() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// restart listens on the same port again. The port was ours until kill; a
// listener socket leaves no TIME_WAIT that blocks a new bind (Go sets
// SO_REUSEADDR), so a short retry only covers the kernel finishing the close.
func (b *lbBackend) restart(t testing.TB) {
	t.Helper()
	var ln net.Listener
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err = net.Listen("tcp", net.JoinHostPort(b.Host, strconv.Itoa(b.Port)))
		if err == nil || time.Now().After(deadline) || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("restarting %s on port %d: %v", b.Name, b.Port, err)
	}
	b.serve(ln)
}

func (b *lbBackend) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seg := path.Base(r.URL.Path)
		if seg == "health" {
			b.healthChecks.Add(1)
			if r.ProtoMajor == 2 {
				b.healthH2.Add(1)
			}
			w.WriteHeader(int(b.healthCode.Load()))
			return
		}
		b.hits.Add(1)
		w.Header().Set("X-Backend", b.Name)
		switch seg {
		case "cancel":
			_, _ = w.Write(make([]byte, 1024))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				b.cancelsSeen.Add(1)
			case <-time.After(30 * time.Second):
				_, _ = w.Write(make([]byte, 1024))
			}
		case "fail":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				panic(http.ErrAbortHandler)
			}
			b.fails.Add(1)
			conn.Close()
		default:
			_, _ = io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "hello from %s\n", b.Name)
		}
	})
}

func (b *lbBackend) nameURL() (string, string) { return b.Name, b.URL }

// ---------------------------------------------------------------------------
// Control API views

// lbBackendState is one element of /v1/backends with the health fields.
type lbBackendState struct {
	ID           string     `json:"id"`
	Upstream     string     `json:"upstream"`
	Source       string     `json:"source"`
	Address      string     `json:"address"`
	Protocol     string     `json:"protocol"`
	Health       string     `json:"health"`
	HealthReason string     `json:"health_reason"`
	Ejected      bool       `json:"ejected"`
	EjectedUntil *time.Time `json:"ejected_until"`
	Eligible     bool       `json:"eligible"`
	Membership   string     `json:"membership"`
	InFlight     int64      `json:"in_flight"`
	Requests     uint64     `json:"requests"`
	Weight       int        `json:"weight"`
}

func (s lbBackendState) String() string {
	return fmt.Sprintf("%s{health=%s(%s) ejected=%v eligible=%v in_flight=%d requests=%d weight=%d}",
		s.ID, s.Health, s.HealthReason, s.Ejected, s.Eligible, s.InFlight, s.Requests, s.Weight)
}

// lbBackends returns upstream's backends from /v1/backends keyed by their
// name: the static backend name, or the service ID of a discovered one
// (listed as NODE/SERVICE-ID).
func lbBackends(a *agentProc, upstream string) map[string]lbBackendState {
	a.t.Helper()
	code, body := a.control("GET", "/v1/backends", nil)
	if code != http.StatusOK {
		a.t.Fatalf("/v1/backends: %d %s", code, body)
	}
	var all []lbBackendState
	if err := json.Unmarshal(body, &all); err != nil {
		a.t.Fatalf("/v1/backends: %v in %s", err, body)
	}
	out := map[string]lbBackendState{}
	for _, b := range all {
		if b.Upstream != upstream {
			continue
		}
		name := b.ID
		if i := strings.LastIndexByte(name, '/'); i >= 0 {
			name = name[i+1:]
		}
		out[name] = b
	}
	return out
}

func lbDescribe(m map[string]lbBackendState) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, m[n].String())
	}
	return strings.Join(parts, " ")
}

// lbCounter sums the Prometheus samples of metric name on /metrics whose
// labels include every label of want (0 when there is none).
func lbCounter(a *agentProc, name string, want map[string]string) float64 {
	a.t.Helper()
	code, body := a.control("GET", "/metrics", nil)
	if code != http.StatusOK {
		a.t.Fatalf("/metrics: %d %s", code, body)
	}
	var sum float64
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		end := strings.LastIndex(rest, "} ")
		if end < 0 {
			continue
		}
		labels := lbParseLabels(rest[:end])
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest[end+2:])[0], 64)
		if err != nil {
			a.t.Fatalf("/metrics: %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// lbParseLabels parses `a="x",b="y"` (Prometheus text format escapes).
func lbParseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return out
		}
		key := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		out[key] = val.String()
		s = strings.TrimPrefix(s[min(i+1, len(s)):], ",")
	}
	return out
}

// ---------------------------------------------------------------------------
// Client load

// lbSample is one client request of an lbLoad.
type lbSample struct {
	start, end time.Time
	backend    string // X-Backend of a successful answer
	err        string // "" on success
}

// lbLoad runs workers goroutines that GET url in a loop (one request at a
// time each) until Stop or until maxDur has passed, recording every request.
type lbLoad struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []lbSample
}

func lbStartLoad(t *testing.T, c *http.Client, url string, workers int, maxDur time.Duration) *lbLoad {
	l := &lbLoad{stop: make(chan struct{})}
	until := time.Now().Add(maxDur)
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for time.Now().Before(until) {
				select {
				case <-l.stop:
					return
				default:
				}
				s := lbSample{start: time.Now()}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := c.Do(req)
				if err != nil {
					s.err = err.Error()
				} else {
					body, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					switch {
					case rerr != nil:
						s.err = fmt.Sprintf("%d, body: %v", resp.StatusCode, rerr)
					case resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "hello from "):
						s.err = fmt.Sprintf("%d %s %q", resp.StatusCode, resp.Header.Get("X-Impulse-Error"), body)
					default:
						s.backend = resp.Header.Get("X-Backend")
					}
				}
				cancel()
				s.end = time.Now()
				l.mu.Lock()
				l.samples = append(l.samples, s)
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.Stop)
	return l
}

// Stop ends the load and waits for the workers (idempotent).
func (l *lbLoad) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *lbLoad) snapshot() []lbSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]lbSample(nil), l.samples...)
}

// successesOf counts the successful answers from backend that ended after
// since.
func (l *lbLoad) successesOf(backend string, since time.Time) int {
	n := 0
	for _, s := range l.snapshot() {
		if s.err == "" && s.backend == backend && s.end.After(since) {
			n++
		}
	}
	return n
}

// lbShare is backend's share of the successful answers that ended in
// [from, to), and their total.
func lbShare(samples []lbSample, backend string, from, to time.Time) (float64, int) {
	var n, total int
	for _, s := range samples {
		if s.err != "" || s.end.Before(from) || !s.end.Before(to) {
			continue
		}
		total++
		if s.backend == backend {
			n++
		}
	}
	if total == 0 {
		return 0, 0
	}
	return float64(n) / float64(total), total
}

// lbSpread sends n GETs to url from workers goroutines, with header set on
// each request by hdr(i) (may be nil), and returns the X-Backend of every
// answer by request index; it returns an error naming the first failure
// when any request failed (transport error or non-200 answer). It may run
// on any goroutine.
func lbSpread(c *http.Client, url string, n, workers int, hdr func(i int) http.Header) ([]string, error) {
	out := make([]string, n)
	var next atomic.Int64
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				if hdr != nil {
					req.Header = hdr(i)
				}
				resp, err := c.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d %s", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
					}
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("request %d: %v", i, err))
					mu.Unlock()
					continue
				}
				out[i] = resp.Header.Get("X-Backend")
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		return out, fmt.Errorf("%d of %d requests to %s failed; first: %s", len(failures), n, url, failures[0])
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// Tests

// TestKillOneOfThreeUnderLoad is the "done means": three HTTP/1.1
// backends under steady load; one is killed (connects refused, requests in
// flight reset). No client sees an error: every request sent to the dead
// backend is retried on another one (connect failures by default, the GETs
// in flight at the kill with on = "reset"), while the passive threshold and
// the active check take it out; brought back on the same port, it turns
// healthy, receives traffic again and its share ramps up over slow_start.
func TestKillOneOfThreeUnderLoad(t *testing.T) {
	const (
		threshold = 3 // outlier_detection.consecutive_failures
		workers   = 4 // client goroutines, one request in flight each
		slowStart = 3 * time.Second
	)
	k1, k2, k3 := newLBBackend(t, "k1"), newLBBackend(t, "k2"), newLBBackend(t, "k3")
	// min_retry_concurrency = workers: each worker may have a retry in
	// flight at the kill, with too few requests active for budget_percent
	// to allow more than the minimum.
	extra := fmt.Sprintf(`  slow_start = %q
  retry {
    on                    = ["connect-failure", "refused-stream", "reset"]
    min_retry_concurrency = %d
  }
  outlier_detection {
    consecutive_failures = %d
    base_ejection_time   = "1s"
    max_ejection_percent = 50
  }
  health_check {
    path                = "/health"
    interval            = "200ms"
    timeout             = "100ms"
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }
`, slowStart, workers, threshold)
	a := startAgent(t, baseHCL()+staticUpstreamHCL("web", "/", extra, k1, k2, k3))
	waitFor(t, 10*time.Second, "the three backends healthy in /v1/backends", func() bool {
		bs := lbBackends(a, "web")
		n := 0
		for _, b := range bs {
			if b.Health == "healthy" && b.Eligible {
				n++
			}
		}
		return n == 3
	})

	c, _ := newH3Client(t)
	l := lbStartLoad(t, c, a.URL("/"), workers, 40*time.Second)
	start := time.Now()
	waitFor(t, 10*time.Second, "traffic on the three backends", func() bool {
		return l.successesOf("k1", start) >= 30 && l.successesOf("k2", start) >= 30 && l.successesOf("k3", start) >= 30
	})
	if s := l.snapshot(); len(s) > 0 {
		for _, x := range s {
			if x.err != "" {
				t.Fatalf("a request failed before the kill: %s", x.err)
			}
		}
	}

	// Kill k3: listener and connections closed, connects refused.
	k3.kill()
	tKill := time.Now()
	var tOut time.Time // when /v1/backends first reported k3 ineligible
	waitFor(t, 5*time.Second, "k3 ineligible in /v1/backends", func() bool {
		if !lbBackends(a, "web")["k3"].Eligible {
			tOut = time.Now()
			return true
		}
		return false
	})
	// Stay down past the end of the 1 s ejection: the active check (two
	// failures 200 ms apart) must keep k3 out once the ejection expires.
	waitFor(t, 10*time.Second, "k3 unhealthy, its ejection over, 2.5 s after the kill", func() bool {
		b := lbBackends(a, "web")["k3"]
		return time.Since(tKill) >= 2500*time.Millisecond && b.Health == "unhealthy" && !b.Ejected && !b.Eligible
	})
	down := lbBackends(a, "web")
	t.Logf("k3 down: reported ineligible %s after the kill; now %s", tOut.Sub(tKill).Round(time.Millisecond), down["k3"])
	if r := down["k3"].HealthReason; r == "" {
		t.Errorf("k3 unhealthy without a health_reason")
	}
	if e, _ := a.logs.find("backend ejected", func(m map[string]any) bool { return m["backend"] == "k3" }); e != nil {
		t.Logf("agent: backend ejected: reason %v at %v", e["reason"], e["@timestamp"])
	} else {
		t.Logf("k3 was marked unhealthy by the active check before the passive threshold ejected it")
	}

	// Errors while k3 is down: none. Every request that picks k3 once it is
	// dead fails with a refused connection (the backend never saw it) or a
	// reset before any response (in flight at the kill, a GET): both are
	// retried on k1 or k2, which answer. (Before retries the bound was
	// consecutive_failures + workers − 1.)
	var downErrs, lateErrs []string
	for _, s := range l.snapshot() {
		if s.err == "" {
			continue
		}
		// Started at kill time + offset (negative: in flight at the kill).
		e := fmt.Sprintf("kill%+.1fms: %s", float64(s.start.Sub(tKill).Microseconds())/1000, s.err)
		downErrs = append(downErrs, e)
		if s.start.After(tOut) {
			lateErrs = append(lateErrs, e)
		}
	}
	retries := lbCounter(a, "impulse_retries", map[string]string{"upstream": "web"})
	t.Logf("client errors while k3 was down: %d; retries so far: %v", len(downErrs), retries)
	if len(downErrs) > 0 {
		t.Errorf("%d client-visible errors after the kill, want 0 (retried on the other backends): %v", len(downErrs), downErrs)
	}
	if len(lateErrs) > 0 {
		t.Errorf("%d requests started after k3 was reported ineligible failed (want 0 while it is down): %v", len(lateErrs), lateErrs)
	}
	if n := l.successesOf("k3", tOut.Add(100*time.Millisecond)); n > 0 {
		t.Errorf("%d successful answers from k3 while it was down", n)
	}

	// Bring k3 back on the same port.
	errsBefore := len(downErrs)
	k3.restart(t)
	tBack := time.Now()
	var tHealthy time.Time
	waitFor(t, 10*time.Second, "k3 healthy and eligible again", func() bool {
		b := lbBackends(a, "web")["k3"]
		if b.Health == "healthy" && b.Eligible {
			tHealthy = time.Now()
			return true
		}
		return false
	})
	waitFor(t, 5*time.Second, "k3 to receive traffic again", func() bool { return l.successesOf("k3", tBack) > 0 })
	var tFirst time.Time
	for _, s := range l.snapshot() {
		if s.err == "" && s.backend == "k3" && s.end.After(tBack) && (tFirst.IsZero() || s.end.Before(tFirst)) {
			tFirst = s.end
		}
	}
	t.Logf("k3 back: healthy in /v1/backends %s after the restart, first answer %s after it",
		tHealthy.Sub(tBack).Round(time.Millisecond), tFirst.Sub(tBack).Round(time.Millisecond))

	// Its share over one-second windows from its first answer: the weight
	// ramps 1 → 100 over 3 s against 2 × 100, so the expected share is about
	// 7% in [0,1s), 20% in [1,2s), 29% in [2,3s) and 1/3 from 3 s on.
	windows := []struct{ from, to time.Duration }{{0, time.Second}, {time.Second, 2 * time.Second}, {2 * time.Second, 3 * time.Second}, {3300 * time.Millisecond, 4300 * time.Millisecond}}
	last := windows[len(windows)-1].to
	waitFor(t, last+10*time.Second, "the slow-start observation windows", func() bool { return time.Since(tFirst) >= last })
	l.Stop()
	samples := l.snapshot()
	shares := make([]float64, len(windows))
	var desc []string
	for i, w := range windows {
		sh, total := lbShare(samples, "k3", tFirst.Add(w.from), tFirst.Add(w.to))
		shares[i] = sh
		desc = append(desc, fmt.Sprintf("[%s,%s): %.1f%% of %d", w.from, w.to, 100*sh, total))
		if total < 100 {
			t.Errorf("only %d answers in window [%s,%s): the load is too thin to measure shares", total, w.from, w.to)
		}
	}
	t.Logf("k3 share after its return: %s", strings.Join(desc, "; "))
	if shares[0] >= 0.20 {
		t.Errorf("k3's share in the first second after its return is %.1f%%, want clearly below 1/3 (< 20%%) with slow_start = %s", 100*shares[0], slowStart)
	}
	if s := shares[len(shares)-1]; s < 0.27 || s > 0.40 {
		t.Errorf("k3's share %s after its return is %.1f%%, want about 1/3", windows[len(windows)-1].from, 100*s)
	}
	if !(shares[0] < shares[1] && shares[1] < shares[len(shares)-1]) {
		t.Errorf("k3's share does not ramp up over slow_start: %s", strings.Join(desc, "; "))
	}
	var afterErrs []string
	for _, s := range samples {
		if s.err != "" && s.start.After(tOut) {
			afterErrs = append(afterErrs, s.err)
		}
	}
	if len(afterErrs) > 0 {
		t.Errorf("%d requests failed while k3 was down or recovering (after %d errors at the kill): %v", len(afterErrs), errsBefore, afterErrs)
	}
	ok := 0
	for _, s := range samples {
		if s.err == "" {
			ok++
		}
	}
	t.Logf("client requests: %d, of which %d ok; hits k1 %d, k2 %d, k3 %d; total %s",
		len(samples), ok, k1.hits.Load(), k2.hits.Load(), k3.hits.Load(), time.Since(start).Round(time.Millisecond))
	a.Stop()
}

// TestB26AllUnhealthyIs503: every backend's active check fails → 503 with
// x-impulse-error: no_healthy_backend; the request metric counts it as 5xx
// no_healthy_backend and the access log line records 503.
func TestB26AllUnhealthyIs503(t *testing.T) {
	b1, b2 := newLBBackend(t, "b26-1"), newLBBackend(t, "b26-2")
	b1.healthCode.Store(http.StatusServiceUnavailable)
	b2.healthCode.Store(http.StatusServiceUnavailable)
	extra := `  health_check {
    path                = "/health"
    interval            = "100ms"
    timeout             = "100ms"
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }
`
	a := startAgent(t, baseHCL()+staticUpstreamHCL("b26", "/b26/", extra, b1, b2), "-log-level=debug")
	waitFor(t, 10*time.Second, "both backends unhealthy", func() bool {
		bs := lbBackends(a, "b26")
		return len(bs) == 2 && bs["b26-1"].Health == "unhealthy" && bs["b26-2"].Health == "unhealthy" &&
			!bs["b26-1"].Eligible && !bs["b26-2"].Eligible
	})
	bs := lbBackends(a, "b26")
	for _, b := range bs {
		if b.HealthReason != "status 503" {
			t.Errorf("%s: health_reason %q, want \"status 503\"", b.ID, b.HealthReason)
		}
	}

	labels := map[string]string{"upstream": "b26", "code": "5xx", "reason": "no_healthy_backend"}
	before := lbCounter(a, "impulse_requests", labels)
	c, _ := newH3Client(t)
	const n = 3
	for i := range n {
		r := mustGet(t, c, a.URL(fmt.Sprintf("/b26/req-%d", i)))
		if r.Status != http.StatusServiceUnavailable || r.Header.Get("X-Impulse-Error") != "no_healthy_backend" {
			t.Errorf("GET /b26/req-%d: %d x-impulse-error=%q %q, want 503 no_healthy_backend", i, r.Status, r.Header.Get("X-Impulse-Error"), r.Body)
		}
	}
	after := lbCounter(a, "impulse_requests", labels)
	t.Logf("impulse_requests%v: %v → %v", labels, before, after)
	if after-before != n {
		t.Errorf("impulse_requests{code=\"5xx\",reason=\"no_healthy_backend\",upstream=\"b26\"} went %v → %v, want +%d", before, after, n)
	}
	if ok := lbCounter(a, "impulse_requests", map[string]string{"upstream": "b26", "code": "2xx"}); ok != 0 {
		t.Errorf("impulse_requests counts %v 2xx answers for b26, want 0", ok)
	}

	for i := range n {
		p := fmt.Sprintf("/b26/req-%d", i)
		e := a.waitLog(5*time.Second, "request", func(m map[string]any) bool { return m["path"] == p })
		if e == nil {
			continue
		}
		if e["status"] != float64(503) || e["reason"] != "no_healthy_backend" || e["upstream"] != "b26" {
			t.Errorf("access log line for %s: status %v reason %v upstream %v, want 503 no_healthy_backend b26", p, e["status"], e["reason"], e["upstream"])
		}
	}
	if h := b1.hits.Load() + b2.hits.Load(); h != 0 {
		t.Errorf("the unhealthy backends received %d requests", h)
	}
	a.Stop()
}

// TestActiveCheckOverHTTP2: the active check of an HTTP/2-over-TLS backend
// (upstream tls.ca_file) reaches /health over HTTP/2 and drives it
// healthy → unhealthy → healthy, and traffic follows.
func TestActiveCheckOverHTTP2(t *testing.T) {
	h2 := newLBH2Backend(t, "h2-hc")
	extra := tlsHCL(h2.CAFile) + `  health_check {
    path                = "/health"
    interval            = "100ms"
    timeout             = "100ms"
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }
`
	a := startAgent(t, baseHCL()+staticUpstreamHCL("h2hc", "/", extra, h2))
	c, _ := newH3Client(t)
	state := func() lbBackendState { return lbBackends(a, "h2hc")["h2-hc"] }

	waitFor(t, 10*time.Second, "h2-hc healthy", func() bool { return state().Health == "healthy" })
	if s := state(); s.Protocol != "h2" {
		t.Errorf("/v1/backends protocol %q, want h2", s.Protocol)
	}
	if r := mustGet(t, c, a.URL("/x")); r.Status != http.StatusOK || r.Body != "hello from h2-hc\n" {
		t.Errorf("GET /x while healthy: %d %q", r.Status, r.Body)
	}

	h2.healthCode.Store(http.StatusServiceUnavailable)
	t0 := time.Now()
	waitFor(t, 10*time.Second, "h2-hc unhealthy", func() bool { return state().Health == "unhealthy" })
	t.Logf("unhealthy %s after /health started failing: %s", time.Since(t0).Round(time.Millisecond), state())
	if s := state(); s.HealthReason != "status 503" || s.Eligible {
		t.Errorf("while failing: %s, want reason \"status 503\" and not eligible", s)
	}
	if r := mustGet(t, c, a.URL("/x")); r.Status != http.StatusServiceUnavailable || r.Header.Get("X-Impulse-Error") != "no_healthy_backend" {
		t.Errorf("GET /x while unhealthy: %d %q %q, want 503 no_healthy_backend", r.Status, r.Header.Get("X-Impulse-Error"), r.Body)
	}

	h2.healthCode.Store(http.StatusOK)
	t1 := time.Now()
	waitFor(t, 10*time.Second, "h2-hc healthy again", func() bool { s := state(); return s.Health == "healthy" && s.Eligible })
	t.Logf("healthy again %s after /health recovered", time.Since(t1).Round(time.Millisecond))
	if r := mustGet(t, c, a.URL("/x")); r.Status != http.StatusOK || r.Body != "hello from h2-hc\n" {
		t.Errorf("GET /x once healthy again: %d %q", r.Status, r.Body)
	}

	// unknown → healthy, healthy → unhealthy, unhealthy → healthy.
	if n := lbCounter(a, "impulse_backend_health_transitions", map[string]string{"upstream": "h2hc", "kind": "health"}); n < 3 {
		t.Errorf("impulse_backend_health_transitions{kind=\"health\",upstream=\"h2hc\"} = %v, want at least 3", n)
	}
	checks, overH2 := h2.healthChecks.Load(), h2.healthH2.Load()
	t.Logf("health checks received: %d, over HTTP/2: %d", checks, overH2)
	if checks < 4 || checks != overH2 {
		t.Errorf("%d health checks reached the backend, %d of them over HTTP/2; want every one over HTTP/2", checks, overH2)
	}
	a.Stop()
}

// TestL01WeightsThroughConsul: two instances registered in Consul with
// Weights.Passing 300 and 100; under round_robin and random the heavy one
// receives 75% ± 4% of 2,000 requests.
func TestL01WeightsThroughConsul(t *testing.T) {
	consul := sharedConsul(t)
	const service = "e2e-l01-weights"
	heavy, light := newLBBackend(t, "l01-heavy"), newLBBackend(t, "l01-light")
	for _, x := range []struct {
		b *lbBackend
		w int
	}{{heavy, 300}, {light, 100}} {
		id := x.b.Name
		t.Cleanup(func() { _ = consul.Client().Agent().ServiceDeregister(id) })
		consul.Register(t, api.AgentServiceRegistration{
			ID: id, Name: service, Address: x.b.Host, Port: x.b.Port,
			Meta:    map[string]string{"impulse-scheme": "http"},
			Weights: &api.AgentWeights{Passing: x.w, Warning: 1},
			Check:   &api.AgentServiceCheck{CheckID: id + ":ttl", TTL: "10m", Status: api.HealthPassing},
		})
	}
	policies := []string{"round_robin", "random"}
	cfg := baseHCL() + fmt.Sprintf("\nconsul {\n  address = %q\n  wait    = \"5s\"\n}\n", consul.Addr())
	for _, p := range policies {
		cfg += fmt.Sprintf(`
upstream %q {
  load_balancing = %q
  route {
    path_prefix = "/%s/"
  }
  consul {
    service = %q
    scheme  = "http"
  }
}
`, p, p, p, service)
	}
	a := startAgent(t, cfg)
	for _, p := range policies {
		// Consul weights are scaled by 100 to the static-backend scale.
		waitFor(t, 10*time.Second, p+": both instances in /v1/backends with weights 30000 and 10000", func() bool {
			bs := lbBackends(a, p)
			return bs["l01-heavy"].Weight == 30000 && bs["l01-light"].Weight == 10000
		})
	}

	c, _ := newH3Client(t)
	const n = 2000
	var wg sync.WaitGroup
	got := make([][]string, len(policies))
	errs := make([]error, len(policies))
	for i, p := range policies {
		wg.Go(func() { got[i], errs[i] = lbSpread(c, a.URL("/"+p+"/x"), n, 6, nil) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, p := range policies {
		counts := map[string]int{}
		for _, b := range got[i] {
			counts[b]++
		}
		share := float64(counts["l01-heavy"]) / n
		t.Logf("%s: l01-heavy %d, l01-light %d of %d (%.1f%%)", p, counts["l01-heavy"], counts["l01-light"], n, 100*share)
		if counts["l01-heavy"]+counts["l01-light"] != n {
			t.Errorf("%s: answers from unexpected backends: %v", p, counts)
		}
		if share < 0.71 || share > 0.79 {
			t.Errorf("%s: the weight-300 instance got %.1f%% of %d requests, want 75%% ± 4%%", p, 100*share, n)
		}
	}
	a.Stop()
}

// TestConsistentHashByHeader: consistent_hash on header:X-User over three
// backends sends every request of a user to the same backend; removing one
// backend (reload without it) keeps the users of the other two where they
// were and moves only the removed backend's users.
func TestConsistentHashByHeader(t *testing.T) {
	bs := []*lbBackend{newLBBackend(t, "ch-1"), newLBBackend(t, "ch-2"), newLBBackend(t, "ch-3")}
	extra := "  load_balancing = \"consistent_hash\"\n  hash_on        = \"header:X-User\"\n"
	a := startAgent(t, baseHCL()+staticUpstreamHCL("ch", "/", extra, bs...))
	c, _ := newH3Client(t)

	const users, repeats = 50, 5
	user := func(i int) string { return fmt.Sprintf("user-%02d", i%users) }
	hdr := func(i int) http.Header { return http.Header{"X-User": {user(i)}} }
	// mapping sends users × repeats requests (interleaved, concurrent) and
	// returns the single backend of each user.
	mapping := func(phase string) map[string]string {
		got, err := lbSpread(c, a.URL("/ch"), users*repeats, 6, hdr)
		if err != nil {
			t.Fatalf("%s: %v", phase, err)
		}
		seen := map[string]map[string]int{}
		for i, b := range got {
			u := user(i)
			if seen[u] == nil {
				seen[u] = map[string]int{}
			}
			seen[u][b]++
		}
		out := map[string]string{}
		for u, m := range seen {
			if len(m) != 1 {
				t.Errorf("%s: %s landed on several backends: %v", phase, u, m)
			}
			for b := range m {
				out[u] = b
			}
		}
		return out
	}

	before := mapping("three backends")
	perBackend := map[string]int{}
	for _, b := range before {
		perBackend[b]++
	}
	t.Logf("users per backend with three: %v", perBackend)
	for _, b := range bs {
		if perBackend[b.Name] == 0 {
			t.Errorf("no user maps to %s: %v", b.Name, perBackend)
		}
	}

	// Remove ch-2 by reloading the configuration without it.
	if err := os.WriteFile(a.ConfigPath, []byte(baseHCL()+staticUpstreamHCL("ch", "/", extra, bs[0], bs[2])), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := a.control("POST", "/v1/reload", nil); code != http.StatusOK {
		t.Fatalf("POST /v1/reload: %d %s", code, body)
	}
	waitFor(t, 5*time.Second, "ch-2 gone from /v1/backends", func() bool {
		m := lbBackends(a, "ch")
		_, has := m["ch-2"]
		return !has && len(m) == 2
	})
	hits2 := bs[1].hits.Load()
	after := mapping("after removing ch-2")
	if d := bs[1].hits.Load() - hits2; d != 0 {
		t.Errorf("the removed backend ch-2 received %d requests after the reload", d)
	}
	moved, kept, rehomed := []string{}, 0, 0
	for u, was := range before {
		now := after[u]
		switch {
		case was == "ch-2":
			rehomed++
			if now != "ch-1" && now != "ch-3" {
				t.Errorf("%s was on ch-2, now on %q", u, now)
			}
		case now == was:
			kept++
		default:
			moved = append(moved, fmt.Sprintf("%s: %s → %s", u, was, now))
		}
	}
	sort.Strings(moved)
	t.Logf("after removing ch-2: %d users kept their backend, %d of ch-2's users rehomed, %d others moved", kept, rehomed, len(moved))
	if len(moved) > 0 {
		t.Errorf("users of the remaining backends changed backend when ch-2 was removed: %v", moved)
	}
	a.Stop()
}

// TestLeastRequestInFlightReturnsToZero is L03 end to end: least_request
// over three backends, 300 requests of which a third are canceled by the
// client mid-response and a third fail at the backend (connection hijacked
// and closed); afterwards every backend's in_flight is 0 and none was
// starved.
func TestLeastRequestInFlightReturnsToZero(t *testing.T) {
	bs := []*lbBackend{newLBBackend(t, "lr-1"), newLBBackend(t, "lr-2"), newLBBackend(t, "lr-3")}
	// Outlier detection off: a third of the requests fail at random, and
	// the case is the balancer's in-flight count, not ejection.
	a := startAgent(t, baseHCL()+staticUpstreamHCL("lr", "/", "  load_balancing = \"least_request\"\n  outlier_detection { enabled = false }\n  retry { attempts = 1 }\n", bs...))
	c, _ := newH3Client(t)

	const per = 100
	kinds := make([]string, 0, 3*per)
	for _, k := range []string{"ok", "cancel", "fail"} {
		for range per {
			kinds = append(kinds, k)
		}
	}
	r := rand.New(rand.NewPCG(3, 1000))
	r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })

	var next atomic.Int64
	var mu sync.Mutex
	var problems []string
	problem := func(format string, args ...any) {
		mu.Lock()
		if len(problems) < 20 {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	var canceledMidBody atomic.Int64
	one := func(kind string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL("/"+kind), nil)
		resp, err := c.Do(req)
		if err != nil {
			problem("%s: %v", kind, err)
			return
		}
		defer resp.Body.Close()
		switch kind {
		case "ok":
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), "hello from ") {
				problem("ok: %d %q %v", resp.StatusCode, b, err)
			}
		case "cancel":
			// Read part of the body, then go away mid-response.
			buf := make([]byte, 512)
			if _, err := io.ReadFull(resp.Body, buf); err != nil || resp.StatusCode != http.StatusOK {
				problem("cancel: %d, first bytes: %v", resp.StatusCode, err)
				return
			}
			cancel()
			canceledMidBody.Add(1)
		case "fail":
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusBadGateway {
				problem("fail: %d %s, want 502", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
			}
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range 12 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(kinds) {
					return
				}
				one(kinds[i])
			}
		})
	}
	wg.Wait()
	sent := time.Since(start)
	if len(problems) > 0 {
		t.Errorf("unexpected answers: %v", problems)
	}

	var states map[string]lbBackendState
	waitFor(t, 10*time.Second, "every backend's in_flight back to 0", func() bool {
		states = lbBackends(a, "lr")
		for _, s := range states {
			if s.InFlight != 0 {
				return false
			}
		}
		return len(states) == 3
	})
	zero := time.Since(start) - sent
	waitFor(t, 10*time.Second, "every canceled request seen canceled at its backend", func() bool {
		var n int64
		for _, b := range bs {
			n += b.cancelsSeen.Load()
		}
		return n == canceledMidBody.Load()
	})
	t.Logf("300 requests in %s; in_flight 0 everywhere %s later: %s", sent.Round(time.Millisecond), zero.Round(time.Millisecond), lbDescribe(states))
	var total uint64
	for _, b := range bs {
		s := states[b.Name]
		total += s.Requests
		t.Logf("%s: %d requests (%d hits, %d canceled, %d failed connections)", b.Name, s.Requests, b.hits.Load(), b.cancelsSeen.Load(), b.fails.Load())
		// Fair share is 100; P2C with coin-flip ties keeps each near it.
		if s.Requests < 50 {
			t.Errorf("%s was starved: %d of 300 requests", b.Name, s.Requests)
		}
	}
	if total != 3*per {
		t.Errorf("/v1/backends counts %d requests in all, want %d", total, 3*per)
	}
	if n := canceledMidBody.Load(); n != per {
		t.Errorf("%d requests canceled mid-response, want %d", n, per)
	}
	a.Stop()
}

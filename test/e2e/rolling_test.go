package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/test/testproc"
)

// backendProcessEnv, set to a name, makes the test binary serve as a
// backend process (serveBackendProcess) instead of running the tests: the
// rolling-deploy test kills real processes with SIGKILL.
const backendProcessEnv = "IMPULSE_E2E_BACKEND"

// r01BodyLen is the size of the rolling-deploy test's POST bodies.
const r01BodyLen = 4096

// serveBackendProcess is the backend process: HTTP/1.1 on a loopback port
// it prints ("port N") on stdout. GET answers "hello from NAME"; POST
// answers "got N bytes" when the body has r01BodyLen bytes, else 400;
// both with X-Backend: NAME. It runs until killed. SIGUSR1 makes it crash
// between two requests: at the first instant it holds no request at all
// (quietTracker), it sends itself SIGKILL (see crash).
func serveBackendProcess(name string) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "backend:", err)
		return 1
	}
	ln := l.(*net.TCPListener)
	fmt.Printf("port %d\n", ln.Addr().(*net.TCPAddr).Port)
	var active atomic.Int64
	q := newQuietTracker(ln)
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		<-usr1
		for !q.quiet(active.Load()) {
			time.Sleep(10 * time.Microsecond)
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}()
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, ConnState: q.connState, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		active.Add(1)
		defer active.Add(-1)
		w.Header().Set("X-Backend", name)
		if r.Method == http.MethodPost {
			n, _ := io.Copy(io.Discard, r.Body)
			if n != r01BodyLen {
				http.Error(w, fmt.Sprintf("got %d bytes, want %d", n, r01BodyLen), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "got %d bytes", n)
			return
		}
		io.WriteString(w, "hello from "+name)
	})}
	_ = srv.Serve(ln)
	return 1
}

// backendProc is a running backend process.
type backendProc struct {
	name string
	port int
	*testproc.Proc
}

// startBackendProc starts the test binary as backend process name and
// waits for its port.
func startBackendProc(t *testing.T, name string) *backendProc {
	t.Helper()
	p := testproc.Start(t, backendProcessEnv+"="+name)
	return &backendProc{name: name, port: p.Port, Proc: p}
}

// kill sends SIGKILL and reaps the process (idempotent).
func (p *backendProc) kill() { p.Kill() }

// crash has the process SIGKILL itself between two requests (SIGUSR1, see
// serveBackendProcess) and reaps it; false when it did not die by SIGKILL.
func (p *backendProc) crash() bool {
	_ = p.Cmd.Process.Signal(syscall.SIGUSR1)
	_ = p.Cmd.Wait()
	ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// r01Sample is one request of the rolling-deploy load.
type r01Sample struct {
	method     string
	start, end time.Time
	err        string // "" on success
}

// TestR01RollingDeployCostsNoRequest is case R01: three backend processes
// registered in a real Consul with checks that never run during the test
// (TTL 10m), about 200 requests per second of GETs and 4 KiB POSTs over
// HTTP/3; each instance in turn is killed with SIGKILL while Consul still
// reports it passing, a replacement is started on another port and
// registered, and the killed one is deregistered (as a scheduler would).
// No client request fails, POSTs included: a refused connection proves the
// backend never saw the request, so it goes to another backend. Passive
// tracking ejects the killed instance within a second, long before Consul
// would notice.
//
// The process kills itself between two requests (crash: at an instant it
// holds no request, none in a handler, none being read, no unread byte, no
// connection waiting to be accepted). A POST the backend had received when
// it died may have run there, and no proxy may send it again (case R03,
// RFC 9110 §9.2.2): failing it is right. Runs that killed at a random
// instant, or only outside the handlers, lost about one POST in three kills
// (written to a kept-alive connection a millisecond before the kill, read
// or not). Crashing between requests keeps what the case is about — every
// request after the crash meets a refused connection or a reset before it
// was read — and makes zero failures the exact expectation. GETs in flight
// at a crash would be retried anyway (on = "reset").
//
// One window stays: a POST whose body the gateway is still receiving from
// the client when the backend dies is written to a kept-alive connection
// the dead process's FIN already closed; net/http reports a connection
// broken after the request was written, which no proxy may replay. With
// clients that send a 4 KiB body at once the window is microseconds; under
// the race detector the test's own client is slow enough to widen it to
// tens of milliseconds, so there such POSTs, started before a kill, are
// reported and tolerated (at most two per kill), every other failure is
// not.
func TestR01RollingDeployCostsNoRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("two minutes of load")
	}
	const (
		rate     = 200 // requests per second, half GETs, half POSTs
		minTotal = 20000
		workers  = 16
		round    = 25 * time.Second // between kills
		warmup   = 8 * time.Second
	)
	c := sharedConsul(t)
	const service = "r01-web"
	generation := map[int]int{} // slot → replacements so far
	register := func(slot int) *backendProc {
		name := fmt.Sprintf("r01-%d-%d", slot, generation[slot])
		p := startBackendProc(t, name)
		c.RegisterTTL(t, name, service, "127.0.0.1", p.port, nil, map[string]string{"impulse-scheme": "http"})
		return p
	}
	var procs [3]*backendProc
	for i := range procs {
		procs[i] = register(i)
	}
	extra := `  retry {
    on = ["connect-failure", "refused-stream", "reset"]
  }
  outlier_detection {
    consecutive_failures = 3
    base_ejection_time   = "30s"
  }
`
	a := startAgent(t, baseHCL()+consulUpstreamHCL(c.Addr(), service, "", extra))
	waitFor(t, 15*time.Second, "three eligible backends", func() bool {
		n := 0
		for _, b := range lbBackends(a, "web") {
			if b.Eligible {
				n++
			}
		}
		return n == 3
	})

	client, _ := newH3Client(t)
	var (
		samplesMu sync.Mutex
		samples   []r01Sample
		sent      atomic.Int64
	)
	jobs := make(chan string, workers)
	var wg sync.WaitGroup
	body := bytes.Repeat([]byte("p"), r01BodyLen)
	for range workers {
		wg.Go(func() {
			for method := range jobs {
				s := r01Sample{method: method, start: time.Now()}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var rd io.Reader
				if method == http.MethodPost {
					rd = bytes.NewReader(body)
				}
				req, _ := http.NewRequestWithContext(ctx, method, a.URL("/r01"), rd)
				resp, err := client.Do(req)
				if err != nil {
					s.err = err.Error()
				} else {
					b, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					want := "hello from "
					if method == http.MethodPost {
						want = fmt.Sprintf("got %d bytes", r01BodyLen)
					}
					if rerr != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), want) {
						s.err = fmt.Sprintf("%d %s %q %v", resp.StatusCode, resp.Header.Get("X-Impulse-Error"), b, rerr)
					}
				}
				cancel()
				s.end = time.Now()
				samplesMu.Lock()
				samples = append(samples, s)
				samplesMu.Unlock()
			}
		})
	}
	start := time.Now()
	stopLoad := make(chan struct{})
	loadDone := make(chan struct{})
	go func() { // a steady rate, whatever the answers take
		defer close(loadDone)
		defer close(jobs)
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopLoad:
				return
			case <-tick.C:
			}
			method := http.MethodGet
			if i%2 == 1 {
				method = http.MethodPost
			}
			select {
			case jobs <- method:
				sent.Add(1)
			default: // every worker busy: the gateway is slow, which the failures show
			}
		}
	}()
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() { close(stopLoad) })
		<-loadDone
		wg.Wait()
	}
	t.Cleanup(stop)

	time.Sleep(warmup)
	var ejections []time.Duration
	var kills []time.Time
	for slot := range procs {
		old := procs[slot]
		oldName := old.name
		if !old.crash() {
			t.Fatalf("%s did not die by SIGKILL: %v", oldName, old.Cmd.ProcessState)
		}
		tKill := time.Now()
		kills = append(kills, tKill)
		var tEjected time.Time
		waitFor(t, 5*time.Second, oldName+" out of traffic (passive ejection)", func() bool {
			b, ok := lbBackends(a, "web")[oldName]
			if ok && b.Ejected {
				tEjected = time.Now()
				return true
			}
			return false
		})
		ejections = append(ejections, tEjected.Sub(tKill))
		t.Logf("%s killed at %s: ejected after %s", oldName, tKill.Sub(start).Round(time.Millisecond), tEjected.Sub(tKill).Round(time.Millisecond))
		// The replacement, on another port, then the killed instance
		// leaves the catalog.
		generation[slot]++
		procs[slot] = register(slot)
		newName := procs[slot].name
		waitFor(t, 15*time.Second, newName+" eligible", func() bool { return lbBackends(a, "web")[newName].Eligible })
		c.Deregister(t, oldName)
		waitFor(t, 15*time.Second, oldName+" gone from the upstream", func() bool {
			b, ok := lbBackends(a, "web")[oldName]
			return !ok || b.Membership != "active"
		})
		if next := tKill.Add(round); slot < len(procs)-1 {
			time.Sleep(time.Until(next))
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	for sent.Load() < minTotal && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	elapsed := time.Since(start)

	var failures, caught []string
	var gets, posts int
	for _, s := range samples {
		if s.method == http.MethodPost {
			posts++
		} else {
			gets++
		}
		if s.err == "" {
			continue
		}
		e := fmt.Sprintf("%s at %s: %s", s.method, s.start.Sub(start).Round(time.Millisecond), s.err)
		if raceEnabled && s.method == http.MethodPost && strings.Contains(s.err, "backend_reset") && slices.ContainsFunc(kills, func(k time.Time) bool {
			// k is when Wait returned: under the race detector and a loaded
			// machine, well after the process died.
			return s.start.Before(k) && s.end.After(k.Add(-500*time.Millisecond))
		}) {
			caught = append(caught, e)
			continue
		}
		failures = append(failures, e)
	}
	if len(caught) > 0 {
		t.Logf("under the race detector, %d POSTs still arriving from the client at a kill failed (tolerated): %v", len(caught), caught)
		if len(caught) > 2*len(kills) {
			t.Errorf("%d POSTs caught by the kills, want at most %d", len(caught), 2*len(kills))
		}
	}
	sort.Strings(failures)
	retries := lbCounter(a, "impulse_retries", map[string]string{"upstream": "web"})
	exhausted := lbCounter(a, "impulse_retries_budget_exhausted", map[string]string{"upstream": "web"})
	t.Logf("R01: %d requests (%d GETs, %d 4 KiB POSTs) in %s (%.0f/s), %d failed (%d more tolerated under -race); 3 SIGKILLs, ejected after %v; retries %v, budget exhausted %v",
		len(samples), gets, posts, elapsed.Round(time.Second), float64(len(samples))/elapsed.Seconds(), len(failures), len(caught), ejections, retries, exhausted)
	if len(samples) < minTotal {
		t.Errorf("only %d requests in %s (want ≥ %d): the load could not be sustained", len(samples), elapsed.Round(time.Second), minTotal)
	}
	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed, want 0: %s", len(failures), len(samples), strings.Join(failures[:min(len(failures), 10)], "; "))
	}
	for i, d := range ejections {
		if d > time.Second {
			t.Errorf("kill %d: ejected after %s, want within a second", i+1, d)
		}
	}
	if retries == 0 {
		t.Error("no retry counted: the kills cost nothing to retry?")
	}
}

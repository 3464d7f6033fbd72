package soak

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testpki"
	"github.com/impulse-agent/impulse-agent/test/consultest"
	"github.com/impulse-agent/impulse-agent/test/testproc"
)

var loopbackIPs = []net.IP{net.IPv4(127, 0, 0, 1)}

// duration is how long the load and faults run: SOAK=full (make soak) 10
// minutes, SOAK=short 90 s, or a Go duration.
func duration(t *testing.T) time.Duration {
	switch s := os.Getenv("SOAK"); s {
	case "short":
		return 90 * time.Second
	case "full":
		return 10 * time.Minute
	default:
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("SOAK=%q: want short, full or a duration", s)
		}
		return d
	}
}

const configTemplate = `
drain_timeout = "5s"
control {
  address      = "127.0.0.1:0"
  enable_debug = true
}
consul {
  address = %[1]q
  wait    = "2s"
}
listener "public" {
  address = "127.0.0.1:0"
  tls {
    cert_file = %[2]q
    key_file  = %[3]q
  }
}
upstream "api" {
  load_balancing = %[6]q
  route {
    path_prefix = "/api/"
  }
  consul {
    service = "soak-api"
  }
  retry {
    attempts = 3
    on       = ["connect-failure", "refused-stream", "reset", "502", "503"]
  }
  outlier_detection {
    consecutive_failures = 3
  }
}
upstream "slow" {
  route {
    path_prefix = "/slow/"
  }
  backend "slow-1" {
    address = "http://127.0.0.1:%[4]d"
  }
}
upstream "stall" {
  route {
    path_prefix = "/stall/"
  }
  timeouts {
    body_idle = "1s"
  }
  backend "stall-1" {
    address = "http://127.0.0.1:%[5]d"
  }
}
%[7]s
`

// extraUpstream is what the second configuration adds.
const extraUpstream = `
upstream "extra" {
  route {
    path_prefix = "/extra/"
  }
  backend "slow-1" {
    address = "http://127.0.0.1:%d"
  }
}
`

// TestSoak is the soak under faults: mixed load over HTTP/1.1, HTTP/2 and
// HTTP/3 (GETs, POSTs with hashed bodies, 1 MiB downloads, SSE streams,
// WebSocket sessions, a slow and a stalling backend) through the built
// gateway fed by a real Consul agent, while faults run on a schedule:
// alternating reloads, a Consul restart, backend SIGKILLs while Consul
// lags, deregister/register churn, check flaps and a certificate rotation.
// It asserts what the issue asks and prints a table.
func TestSoak(t *testing.T) {
	if os.Getenv("SOAK") == "" {
		t.Skip("the soak runs for minutes: make soak (SOAK=full), or SOAK=short (CI runs it)")
	}
	d := duration(t)
	c := consultest.Start(t)
	dir := t.TempDir()
	ca := testpki.NewCA(t, "soak CA")
	w := &world{t: t, consul: c, ca: ca, cfgPath: filepath.Join(dir, "gateway.hcl"),
		certFile: filepath.Join(dir, "cert.pem"), keyFile: filepath.Join(dir, "key.pem"),
		instances: map[string]*instance{}, faults: map[string]int{}}
	certPEM, keyPEM := testpki.PEM(t, ca.Issue(t, testpki.Leaf{CN: "localhost", DNS: []string{"localhost"}, IPs: loopbackIPs}))
	os.WriteFile(w.certFile, certPEM, 0o600)
	os.WriteFile(w.keyFile, keyPEM, 0o600)
	slow := testproc.Start(t, backendEnv+"=slow-1 slow")
	stall := testproc.Start(t, backendEnv+"=stall-1 stall")
	for i, lb := range []string{"round_robin", "least_request"} {
		extra := ""
		if i == 1 {
			extra = fmt.Sprintf(extraUpstream, slow.Port)
		}
		w.cfgs[i] = fmt.Sprintf(configTemplate, c.Addr(), w.certFile, w.keyFile, slow.Port, stall.Port, lb, extra)
	}
	for _, id := range []string{"api-1", "api-2", "api-3", "api-churn"} {
		w.startInstance(id)
	}
	os.WriteFile(w.cfgPath, []byte(w.cfgs[0]), 0o600)
	w.gw = startGateway(t, w.cfgPath)
	tc := &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}
	cl := newClients(w.gw.addr, tc)
	defer cl.close()
	waitFor(t, 20*time.Second, "every instance to serve", func() bool {
		return len(w.backendsInFlight(t)) >= 4+2
	})

	// Warm up, then the baseline at rest.
	warm := &collector{ok: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	runLoad(ctx, cl, warm).Wait()
	cancel()
	cl.close()
	cl = newClients(w.gw.addr, tc)
	base := w.resources(t)

	col := &collector{ok: map[string]int{}}
	ctx, cancel = context.WithCancel(context.Background())
	loadDone := runLoad(ctx, cl, col)
	start := time.Now()
	w.runFaults(start, d)
	cancel()
	loadDone.Wait()
	cl.close()

	// At rest again: in-flight counts drain to 0, then the resources.
	waitFor(t, 15*time.Second, "every backend's in-flight count to return to 0", func() bool {
		for id, n := range w.backendsInFlight(t) {
			if n != 0 {
				t.Logf("%s: %d in flight", id, n)
				return false
			}
		}
		return true
	})
	var after resources
	ok := eventually(20*time.Second, func() bool {
		after = w.resources(t)
		return after.fds <= base.fds+8 && after.goroutines <= base.goroutines+8
	})
	report := w.report(col, d, base, after)
	t.Log("\n" + report)
	if p := os.Getenv("SOAK_REPORT"); p != "" {
		_ = os.WriteFile(p, []byte(report), 0o644)
	}
	if !ok {
		t.Errorf("resources grew: fds %d → %d, goroutines %d → %d", base.fds, after.fds, base.goroutines, after.goroutines)
	}
	// The live heap is the leak signal: what survives a forced collection.
	// RSS after it also holds spans the runtime has not returned to the
	// OS yet; on a gateway of 35 MiB its noise alone (the base measured at
	// 35 to 40 MiB, the end at 43 to 44 MiB, in runs without a leak) is
	// about 25%, so it is held to 25% or 16 MiB, whichever is larger.
	if base.heap < 0 || after.heap < 0 {
		t.Errorf("live heap not read from /metrics (go_memstats_heap_alloc_bytes)")
	} else if float64(after.heap) > 1.25*float64(base.heap)+4<<20 {
		t.Errorf("live heap after GC %d KiB > 1.25 × %d KiB + 4 MiB", after.heap>>10, base.heap>>10)
	}
	if limit := max(1.25*float64(base.rss), float64(base.rss+16<<20)); float64(after.rss) > limit {
		t.Errorf("RSS after GC %d KiB > max(1.25 ×, 16 MiB +) %d KiB", after.rss>>10, base.rss>>10)
	}
	for _, e := range w.errs {
		t.Errorf("fault step: %s", e)
	}
	for _, f := range w.judge(col) {
		t.Error(f)
	}
}

// judge returns every failure the soak does not allow.
func (w *world) judge(col *collector) []string {
	var bad []string
	for _, r := range col.failures {
		if allowed(w, r) {
			continue
		}
		bad = append(bad, fmt.Sprintf("%s over %s at +%v (%v): %s %s (backend %q)", r.kind, r.proto,
			r.start.Sub(col.failures[0].start).Round(time.Millisecond), r.end.Sub(r.start).Round(time.Millisecond), r.failure, r.detail, r.backend))
	}
	return bad
}

// allowed says whether failure r is one the soak tolerates:
//   - a stalling backend's request that breaks (a reset, never a clean
//     short body);
//   - a request in flight at a backend when it was killed, broken by a
//     reset or answered 502: a POST (it may have run; no proxy may resend
//     it), or a download, SSE stream or WebSocket session whose answer had
//     started. Never a clean truncated or corrupt body.
func allowed(w *world, r result) bool {
	if r.failure == "truncated" || r.failure == "corrupt" {
		return false
	}
	if r.kind == "stall" {
		return r.failure == "reset"
	}
	if r.failure != "reset" && r.failure != "status 502" {
		return false
	}
	switch r.kind {
	case "post", "ws":
		return w.killedDuring(r.backend, r.start, r.end)
	case "download", "sse":
		return r.backend != "" && w.killedDuring(r.backend, r.start, r.end)
	}
	return false
}

// runFaults runs the fault schedule over d from start, then returns.
func (w *world) runFaults(start time.Time, d time.Duration) {
	type step struct {
		at time.Duration
		do func()
	}
	var steps []step
	const reloads = 100
	for i := range reloads {
		steps = append(steps, step{d * time.Duration(5+90*i/reloads) / 100, func() { w.reload(i + 1) }})
	}
	kills := []string{"api-1", "api-2", "api-3"}
	for i, id := range kills {
		steps = append(steps, step{d * time.Duration(20+30*i) / 100, func() { w.killAndReplace(id, 2*time.Second) }})
	}
	steps = append(steps, step{d * 35 / 100, w.restartConsul})
	steps = append(steps, step{d * 60 / 100, func() { w.rotateCertificate(reloads + 1) }})
	for at, i := 3*time.Second, 0; at < d-3*time.Second; at, i = at+3*time.Second, i+1 {
		steps = append(steps, step{at, func() { w.churn(i%2 == 0) }})
		status := "critical"
		if i%2 == 1 {
			status = "passing"
		}
		steps = append(steps, step{at + 1500*time.Millisecond, func() { w.flapAny(status) }})
	}
	sort.SliceStable(steps, func(i, j int) bool { return steps[i].at < steps[j].at })
	for _, s := range steps {
		if wait := time.Until(start.Add(s.at)); wait > 0 {
			time.Sleep(wait)
		}
		s.do()
	}
	if wait := time.Until(start.Add(d)); wait > 0 {
		time.Sleep(wait)
	}
	// Leave every check passing and the churn instance registered.
	w.flapAny("passing")
}

// flapAny flaps the check of the first original instance still alive.
func (w *world) flapAny(status string) {
	w.mu.Lock()
	var id string
	for _, cand := range []string{"api-1", "api-2", "api-3", "api-r1", "api-r2", "api-r3"} {
		if w.instances[cand] != nil {
			id = cand
			break
		}
	}
	w.mu.Unlock()
	if id != "" {
		w.flap(id, status)
	}
}

// resources are the gateway process's figures at rest.
type resources struct {
	fds, goroutines int
	rss             int64 // bytes, after a forced GC
	heap            int64 // live heap bytes after that GC (go_memstats_heap_alloc_bytes); -1 unread
}

func (w *world) resources(t *testing.T) resources {
	r := resources{heap: -1}
	pid := w.gw.cmd.Process.Pid
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		r.fds = len(ents)
	}
	// pprof's heap profile with gc=1 runs a GC first; then the RSS.
	if resp, err := http.Get(w.gw.control + "/debug/pprof/heap?gc=1"); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if resp, err := http.Get(w.gw.control + "/debug/pprof/goroutine?debug=1"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if _, rest, ok := strings.Cut(string(b), "total "); ok {
			r.goroutines, _ = strconv.Atoi(strings.Fields(rest)[0])
		}
	}
	if resp, err := http.Get(w.gw.control + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "go_memstats_heap_alloc_bytes "); ok {
				f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				r.heap = int64(f)
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				r.rss = kb << 10
			}
		}
	}
	return r
}

// backendsInFlight returns each backend's in-flight count from /v1/backends.
func (w *world) backendsInFlight(t *testing.T) map[string]int64 {
	resp, err := http.Get(w.gw.control + "/v1/backends")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var bs []struct {
		ID       string `json:"id"`
		Health   string `json:"health"`
		InFlight int64  `json:"in_flight"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&bs); err != nil {
		t.Logf("/v1/backends: %v", err)
		return nil
	}
	out := map[string]int64{}
	for _, b := range bs {
		out[b.ID] = b.InFlight
	}
	return out
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !eventually(d, cond) {
		t.Fatalf("timed out after %v waiting for %s", d, what)
	}
}

func eventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// r09Clients are the concurrent clients every R09 row runs at.
var r09Clients = []int{1, 4, 32, 128}

// r09Requests is the requests of one load run (2,000+, as the case asks).
const r09Requests = 2000

// r09Agent runs the gateway in front of backends with the shipped
// defaults: one upstream, its static backends, and nothing else written
// (no retry, outlier_detection, timeouts or load_balancing block).
func r09Agent(t *testing.T, backends ...*r09Backend) *agentProc {
	t.Helper()
	return startAgent(t, baseHCL()+staticUpstreamHCL("app", "/", "", backends...))
}

// r09Backends is the upstream's backends as /v1/backends reports them.
type r09BackendState struct {
	ID       string `json:"id"`
	Ejected  bool   `json:"ejected"`
	Eligible bool   `json:"eligible"`
	InFlight int64  `json:"in_flight"`
	Requests uint64 `json:"requests"`
}

func r09States(t *testing.T, a *agentProc) map[string]r09BackendState {
	t.Helper()
	code, b := a.control("GET", "/v1/backends", nil)
	if code != http.StatusOK {
		t.Fatalf("/v1/backends: %d %s", code, b)
	}
	var list []r09BackendState
	if err := json.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	m := map[string]r09BackendState{}
	for _, s := range list {
		m[s.ID] = s
	}
	return m
}

// TestR09Calibrate prints what the shipped defaults cost clients for each
// fault of case R09 (set IMPULSE_R09_CALIBRATE=1): the figures of the
// README's table, measured, not asserted.
func TestR09Calibrate(t *testing.T) {
	if os.Getenv("IMPULSE_R09_CALIBRATE") == "" {
		t.Skip("set IMPULSE_R09_CALIBRATE=1 to measure")
	}
	type fault struct {
		name  string
		start func(t *testing.T) *r09Backend
	}
	faults := []fault{
		{"none", func(t *testing.T) *r09Backend { return startR09Backend(t, "ok", "c", 0) }},
		{"refusing", func(t *testing.T) *r09Backend { return refusingBackend(t, "c") }},
		{"blackhole", func(t *testing.T) *r09Backend { return startR09Backend(t, "blackhole", "c", 0) }},
		{"503", func(t *testing.T) *r09Backend { return startR09Backend(t, "503", "c", 0) }},
	}
	var report strings.Builder
	only := os.Getenv("IMPULSE_R09_FAULTS") // e.g. "none,refusing": the rows to measure
	// IMPULSE_R09_BACKENDS=2: the faulty backend and one healthy one (the
	// issue's first measurement), instead of three.
	two := os.Getenv("IMPULSE_R09_BACKENDS") == "2"
	requests, clientCounts := r09Requests, r09Clients
	if v := os.Getenv("IMPULSE_R09_CLIENTS"); v != "" { // e.g. "32,128"
		clientCounts = nil
		for _, f := range strings.Split(v, ",") {
			if n, err := strconv.Atoi(f); err == nil && n > 0 {
				clientCounts = append(clientCounts, n)
			}
		}
	}
	if n, err := strconv.Atoi(os.Getenv("IMPULSE_R09_REQUESTS")); err == nil && n > 0 {
		requests = n
	}
	for _, f := range faults {
		if only != "" && !strings.Contains(","+only+",", ","+f.name+",") {
			continue
		}
		for _, proto := range loadProtocols {
			for _, clients := range clientCounts {
				a := startR09Backend(t, "ok", "a", 0)
				c := f.start(t)
				backends := []*r09Backend{a, c}
				if !two {
					backends = append(backends, startR09Backend(t, "ok", "b", 0))
				}
				agent := r09Agent(t, backends...)
				start := time.Now()
				res := runLoad(t, proto, agent.URL("/"), clients, requests)
				line := fmt.Sprintf("%-10s %s %4d clients: %v (max failure %v) in %v; backends %v", f.name, proto, clients, res,
					res.maxFail.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), r09States(t, agent))
				t.Log(line)
				report.WriteString(line + "\n")
				agent.Stop()
				for _, p := range backends {
					p.kill()
				}
			}
		}
	}
	t.Log("\n" + report.String())
}

// r09Rows runs f for every protocol and client count of an R09 row, with
// a fresh gateway each time: the rows are about a fault met cold.
func r09Rows(t *testing.T, clients []int, f func(t *testing.T, proto string, clients int)) {
	for _, proto := range loadProtocols {
		for _, c := range clients {
			t.Run(fmt.Sprintf("%s/%d", proto, c), func(t *testing.T) { f(t, proto, c) })
		}
	}
}

// TestR09RefusingBackend is case R09 (a): with the shipped defaults, a
// backend refusing connections among three costs clients nothing at 1, 4,
// 32 and 128 concurrent clients over HTTP/2 and HTTP/3: its tries are
// sent again at once to the others (free of the retry budget: it never
// saw them), outlier detection ejects it after 5 failures, and once it
// answers again it is back.
func TestR09RefusingBackend(t *testing.T) {
	r09Rows(t, r09Clients, func(t *testing.T, proto string, clients int) {
		a, b := startR09Backend(t, "ok", "a", 0), startR09Backend(t, "ok", "b", 0)
		c := refusingBackend(t, "c")
		agent := r09Agent(t, a, b, c)
		res := runLoad(t, proto, agent.URL("/"), clients, r09Requests)
		t.Logf("%v", res)
		if res.failures() != 0 {
			t.Errorf("%d failed requests, want 0: %v", res.failures(), res.failed)
		}
		if st := r09States(t, agent)["c"]; !st.Ejected {
			t.Errorf("the refusing backend is not ejected: %+v", st)
		}
		if proto != "h3" || clients != 128 {
			return
		}
		// Brought back: a server on its port again, it takes requests once
		// its ejection (base_ejection_time, 10 s) is over.
		startR09Backend(t, "ok", "c", c.port)
		h3, _ := newH3Client(t)
		waitFor(t, 30*time.Second, "the backend to answer again through the gateway", func() bool {
			resp, err := h3.Get(agent.URL("/"))
			if err != nil {
				return false
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.Header.Get("X-Backend") == "c"
		})
	})
}

// TestR09AnswersOnly503 is case R09 (d): a backend answering 503 to
// everything has at most 5 of its answers reach clients (outlier
// detection's consecutive_failures); 5xx answers are otherwise passed
// through, not retried: the backend answered, and the application may mean
// it. Once it is being ejected, its later 503s are its failures, and an
// idempotent request goes to another backend.
func TestR09AnswersOnly503(t *testing.T) {
	r09Rows(t, r09Clients, func(t *testing.T, proto string, clients int) {
		a, b := startR09Backend(t, "ok", "a", 0), startR09Backend(t, "ok", "b", 0)
		c := startR09Backend(t, "503", "c", 0)
		agent := r09Agent(t, a, b, c)
		res := runLoad(t, proto, agent.URL("/"), clients, r09Requests)
		t.Logf("%v", res)
		if n := res.failed[503]; n > 5 || res.failures() != n {
			t.Errorf("%d 503s and %d failures reached clients, want at most 5 503s and nothing else: %v", n, res.failures(), res.failed)
		}
		if st := r09States(t, agent)["c"]; !st.Ejected {
			t.Errorf("the 503 backend is not ejected: %+v", st)
		}
	})
}

// TestR09AllRefusing is case R09 (e): with every backend refusing
// connections, at 128 clients, the retries stay bounded (backend attempts
// at most 1.2 × requests, case R04's bound) and every failure is answered
// at once; ejection never empties the upstream, so the answer is the
// backends' failure (502), never 503 no_healthy_backend.
func TestR09AllRefusing(t *testing.T) {
	r09Rows(t, []int{128}, func(t *testing.T, proto string, clients int) {
		ok := []*r09Backend{startR09Backend(t, "ok", "a", 0), startR09Backend(t, "ok", "b", 0), startR09Backend(t, "ok", "c", 0)}
		healthy := r09Agent(t, ok...)
		base := runLoad(t, proto, healthy.URL("/"), clients, r09Requests)
		healthy.Stop()
		for _, p := range ok {
			p.kill()
		}
		agent := r09Agent(t, refusingBackend(t, "a"), refusingBackend(t, "b"), refusingBackend(t, "c"))
		res := runLoad(t, proto, agent.URL("/"), clients, r09Requests)
		t.Logf("%v, failures took %v (median), %v (p99), %v (slowest)", res, percentile(res.fail, 50), percentile(res.fail, 99), res.maxFail)
		var attempts uint64
		for _, st := range r09States(t, agent) {
			attempts += st.Requests
		}
		t.Logf("%d backend attempts for %d requests", attempts, res.requests)
		if limit := uint64(float64(res.requests) * 1.2); attempts > limit {
			t.Errorf("%d backend attempts for %d requests, want at most %d", attempts, res.requests, limit)
		}
		if res.failed[502] != res.requests {
			t.Errorf("answers %v, want %d × 502 (backend_connect_failed)", res.failed, res.requests)
		}
		// At once: no failure waits for a timeout (connect is 2 s) or a
		// back-off, so failures come back as fast as successes do with
		// healthy backends. Both are measured at the client, which shares 2
		// cores with 128 connections, the gateway and the race detector.
		p50, p99 := percentile(res.fail, 50), percentile(res.fail, 99)
		b50, b99 := percentile(base.ok, 50), base.p99()
		t.Logf("healthy: %v, median %v", base, b50)
		if p50 > 2*b50+50*time.Millisecond || p99 > 2*b99+100*time.Millisecond {
			t.Errorf("failures took %v (median), %v (p99); successes with healthy backends %v, %v: failures must return at once", p50, p99, b50, b99)
		}
	})
}

// TestR09BlackHole is case R09 (c): a backend that accepts connections and
// reads requests and never answers, among three, at 32 and 128 clients:
// at most 5 requests fail (those it already holds when it is found
// stalled), each within the default response_header timeout; it is
// avoided at once; the other requests' p99 is at most 2× that of a run
// without the fault.
func TestR09BlackHole(t *testing.T) {
	r09Rows(t, []int{32, 128}, func(t *testing.T, proto string, clients int) {
		a, b := startR09Backend(t, "ok", "a", 0), startR09Backend(t, "ok", "b", 0)
		healthy := r09Agent(t, a, b, startR09Backend(t, "ok", "c", 0))
		base := runLoad(t, proto, healthy.URL("/"), clients, r09Requests)
		healthy.Stop()
		hole := startR09Backend(t, "blackhole", "c", 0)
		agent := r09Agent(t, a, b, hole)
		start := time.Now()
		res := runLoad(t, proto, agent.URL("/"), clients, r09Requests)
		t.Logf("no fault: %v; black hole: %v in %v, slowest failure %v", base, res, time.Since(start).Round(time.Millisecond), res.maxFail)
		if res.failures() > 5 {
			t.Errorf("%d failed requests, want at most 5: %v", res.failures(), res.failed)
		}
		if res.maxFail > 35*time.Second {
			t.Errorf("a failure took %v, beyond the 30 s response_header default", res.maxFail)
		}
		if st := r09States(t, agent)["c"]; st.Requests > 8 {
			t.Errorf("the black hole got %d requests: not avoided", st.Requests)
		}
		if p, b := res.p99(), base.p99(); p > 2*b+5*time.Millisecond {
			t.Errorf("p99 %v with the black hole, %v without: more than 2×", p, b)
		}
	})
}

// TestR09DeadConsulInstance is case R09 (b): three Consul instances
// (backend processes, TTL checks passing for 10 minutes) of which one
// process died while Consul still says passing: with the shipped defaults
// no request fails at 1, 4, 32 and 128 clients over HTTP/2 and HTTP/3, as
// with a static backend that refuses connections.
func TestR09DeadConsulInstance(t *testing.T) {
	c := sharedConsul(t)
	r09Rows(t, r09Clients, func(t *testing.T, proto string, clients int) {
		service := fmt.Sprintf("r09-dead-%s-%d", proto, clients)
		for i, name := range []string{"a", "b", "c"} {
			p := startR09Backend(t, "ok", name, 0)
			c.RegisterTTL(t, fmt.Sprintf("%s-%d", service, i), service, "127.0.0.1", p.port, nil, map[string]string{"impulse-scheme": "http"})
			if name == "c" {
				p.kill() // Consul still reports it passing
			}
		}
		agent := startAgent(t, baseHCL()+consulUpstreamHCL(c.Addr(), service, "", ""))
		waitFor(t, 15*time.Second, "three backends from Consul", func() bool { return len(agent.backendIDs("web")) == 3 })
		res := runLoad(t, proto, agent.URL("/"), clients, r09Requests)
		t.Logf("%v", res)
		if res.failures() != 0 {
			t.Errorf("%d failed requests, want 0: %v", res.failures(), res.failed)
		}
	})
}

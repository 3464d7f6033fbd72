package gateway

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestB26NoHealthyBackendIs503: every backend failing its active check gives
// 503 no_healthy_backend; recovery brings traffic back.
func TestB26NoHealthyBackendIs503(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		a, b := testbackend.NewFlappy(t, "a"), testbackend.NewFlappy(t, "b")
		uc := staticUpstream("web", "/", a.Server, b.Server)
		uc.Active = &health.ActiveConfig{Path: "/health", Interval: 20 * time.Millisecond, Timeout: time.Second,
			HealthyThreshold: 1, UnhealthyThreshold: 2, UnknownIsHealthy: true}
		h := newHarnessOver(t, ingress, uc)
		resp := h.get("/")
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("healthy: %d", resp.StatusCode)
		}
		a.Healthy.Store(false)
		b.Healthy.Store(false)
		eventually(t, 5*time.Second, func() bool {
			for _, bi := range h.gw.Backends() {
				if bi.Eligible {
					return false
				}
			}
			return true
		}, "both backends unhealthy")
		before := a.Hits.Load() + b.Hits.Load()
		resp = h.get("/")
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("X-Impulse-Error") != "no_healthy_backend" {
			t.Fatalf("got %d %q, want 503 no_healthy_backend", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
		}
		if a.Hits.Load()+b.Hits.Load() != before {
			t.Fatal("an unhealthy backend received traffic")
		}
		for _, bi := range h.gw.Backends() {
			if bi.Health != "unhealthy" || bi.HealthReason != "status 503" {
				t.Fatalf("snapshot %+v", bi)
			}
		}
		b.Healthy.Store(true)
		eventually(t, 5*time.Second, func() bool {
			resp := h.get("/")
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == 200 && string(body) == "b"
		}, "traffic back on the recovered backend")
	})
}

// TestPassiveEjectionBoundsErrors: one of three backends dies under load;
// with consecutive_failures = 3 the clients see exactly 3 errors before it
// is ejected. (Its return after the ejection time is tested with a fake
// clock in gateway/health.)
func TestPassiveEjectionBoundsErrors(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		a, b := testbackend.NewFlappy(t, "a"), testbackend.NewFlappy(t, "b")
		var dead atomic.Bool
		var cHits atomic.Int64
		c := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if dead.Load() {
				w.WriteHeader(503)
				return
			}
			cHits.Add(1)
			io.WriteString(w, "c")
		}))
		uc := staticUpstream("web", "/", a.Server, b.Server, c)
		uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 3, BaseEjectionTime: time.Minute, MaxEjectionPercent: 50}
		h := newHarnessOver(t, ingress, uc)
		dead.Store(true)
		errors := 0
		for i := 0; i < 60; i++ {
			resp := h.get("/")
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errors++
			}
		}
		if errors != 3 {
			t.Fatalf("%d failed requests, want exactly consecutive_failures = 3", errors)
		}
		for _, bi := range h.gw.Backends() {
			if bi.ID == "2" && (!bi.Ejected || bi.Eligible) {
				t.Fatalf("backend c not reported ejected: %+v", bi)
			}
		}
	})
}

// TestActiveCheckPathWithQuery: a health_check path with a query reaches the
// backend as path and query, not as an escaped path.
func TestActiveCheckPathWithQuery(t *testing.T) {
	got := make(chan string, 16)
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.URL.Path + " ? " + r.URL.RawQuery:
		default:
		}
	}))
	uc := staticUpstream("web", "/", be)
	uc.Active = &health.ActiveConfig{Path: "/status?full=1&x=%2F", Interval: 20 * time.Millisecond, Timeout: time.Second,
		HealthyThreshold: 1, UnhealthyThreshold: 1}
	newHarness(t, uc)
	select {
	case s := <-got:
		if s != "/status ? full=1&x=%2F" {
			t.Fatalf("check request %q, want path /status and query full=1&x=%%2F", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no health check request")
	}
}

// TestBackendsReportDraining: a backend taken away by a reload (here its
// upstream is removed) is reported with membership "removed" while its
// request is in flight, and no longer once it ended.
func TestBackendsReportDraining(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	slow := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		io.WriteString(w, "done")
	}))
	other := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	h := newHarness(t, staticUpstream("old", "/old", slow), staticUpstream("new", "/", other))
	done := make(chan int, 1)
	go func() {
		resp := h.get("/old")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	<-started
	if err := h.gw.Apply(t.Context(), Config{Upstreams: []UpstreamConfig{staticUpstream("new", "/", other)}}); err != nil {
		t.Fatal(err)
	}
	membership := func() string {
		for _, bi := range h.gw.Backends() {
			if bi.Upstream == "old" {
				return bi.Membership
			}
		}
		return ""
	}
	if m := membership(); m != "removed" {
		t.Fatalf("membership of the draining backend: %q", m)
	}
	for _, bi := range h.gw.Backends() {
		if bi.Upstream == "old" && bi.Eligible {
			t.Fatalf("a removed backend is reported eligible: %+v", bi)
		}
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("the draining request: %d", code)
	}
	eventually(t, 5*time.Second, func() bool { return membership() == "" }, "the drained backend to leave the report")
}

// TestReloadKeepsBackendHealth: a reload that rebuilds an upstream (another
// policy) keeps a backend that active checks found down out of rotation,
// instead of starting it over as "unknown" and eligible.
func TestReloadKeepsBackendHealth(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		up := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		down := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		down.Close() // connection refused from now on
		uc := staticUpstream("web", "/", up, down)
		uc.Active = &health.ActiveConfig{Path: "/health", Interval: 20 * time.Millisecond, Timeout: time.Second,
			HealthyThreshold: 1, UnhealthyThreshold: 1, UnknownIsHealthy: true}
		h := newHarnessOver(t, ingress, uc)
		report := func() map[string]BackendInfo {
			out := map[string]BackendInfo{}
			for _, b := range h.gw.Backends() {
				out[b.ID] = b
			}
			return out
		}
		deadline := time.Now().Add(5 * time.Second)
		for report()["1"].Health != "unhealthy" || report()["0"].Health != "healthy" {
			if time.Now().After(deadline) {
				t.Fatalf("the down backend never became unhealthy: %+v", report())
			}
			time.Sleep(5 * time.Millisecond)
		}
		// Another policy, and checks so rare that none runs during the test:
		// what the report says after the reload is what was inherited.
		uc.LoadBalancing = "random"
		active := *uc.Active
		active.Interval = time.Hour
		uc.Active = &active
		if err := h.gw.Apply(t.Context(), Config{Upstreams: []UpstreamConfig{uc}}); err != nil {
			t.Fatal(err)
		}
		if b := report()["1"]; b.Health != "unhealthy" || b.Eligible {
			t.Fatalf("after the reload the down backend is %s, eligible %v", b.Health, b.Eligible)
		}
		if b := report()["0"]; b.Health != "healthy" || !b.Eligible {
			t.Fatalf("after the reload the live backend is %s, eligible %v", b.Health, b.Eligible)
		}
	})
}

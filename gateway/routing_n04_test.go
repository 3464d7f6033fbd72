package gateway

import (
	"math"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// splitBackend answers with its name in X-Backend.
func splitBackend(t *testing.T, name string) UpstreamConfig {
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
	}))
	return staticUpstream(name, "/direct/"+name+"/", be)
}

// n04Config is case N04's gateway: upstream "web" routes "/" 90/10 to
// web-v1 and web-v2 and "/sticky/" by cookie:session; "empty" has no
// backend at all (a split to it is skipped).
func n04Config(t *testing.T, sink *logSink) Config {
	web := UpstreamConfig{Config: staticUpstream("web", "/").Config, Routes: []RouteConfig{
		{PathPrefix: "/", Splits: []SplitConfig{{"web-v1", 90}, {"web-v2", 10}}},
		{PathPrefix: "/sticky/", Splits: []SplitConfig{{"web-v1", 90}, {"web-v2", 10}}, Sticky: "cookie:session"},
		{PathPrefix: "/skip/", Splits: []SplitConfig{{"empty", 50}, {"web-v2", 50}}},
	}}
	return Config{Upstreams: []UpstreamConfig{web, splitBackend(t, "web-v1"), splitBackend(t, "web-v2"), staticUpstream("empty", "/direct/empty/")},
		AccessLog: &accesslog.Config{Writer: sink}}
}

// n04Get is the X-Backend of a GET of path (with cookie when not empty).
func n04Get(t *testing.T, h *harness, path, cookie string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.base+path, nil)
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", path, resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
	}
	return resp.Header.Get("X-Backend")
}

// TestN04WeightedSplit: case N04 over every ingress. 2,000 requests to a
// 90/10 split land within ±2% of 10% on web-v2 (the decision itself is
// checked over 10,000 in package split, TestN04Distribution), and the
// access log names the chosen upstream as the request's.
func TestN04WeightedSplit(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		sink := &logSink{}
		h := startHarnessConfig(t, n04Config(t, sink), ListenerConfig{}, proto)
		const n = 2000
		var v2 int
		for range n {
			if n04Get(t, h, "/x", "") == "web-v2" {
				v2++
			}
		}
		if share := float64(v2) / n; math.Abs(share-0.10) > 0.02 {
			t.Errorf("web-v2 got %d of %d (%.1f%%), want 10%% ± 2", v2, n, share*100)
		}
		lines := sink.wait(t, n)
		var logged int
		for _, l := range lines {
			if l["upstream"] == "web-v2" {
				logged++
			}
		}
		if logged != v2 {
			t.Errorf("access log: %d lines with upstream web-v2, %d answers from it", logged, v2)
		}
	})
}

// TestN04StickyCanary: each session stays on one side, and sessions
// reach both.
func TestN04StickyCanary(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		h := startHarnessConfig(t, n04Config(t, &logSink{}), ListenerConfig{}, proto)
		sides := map[string]int{}
		for s := range 200 {
			cookie := "theme=dark; session=s" + strconv.Itoa(s)
			first := n04Get(t, h, "/sticky/a", cookie)
			for range 3 {
				if got := n04Get(t, h, "/sticky/b", cookie); got != first {
					t.Fatalf("session %d: %s then %s", s, first, got)
				}
			}
			sides[first]++
		}
		if sides["web-v1"] == 0 || sides["web-v2"] == 0 || sides["web-v2"] > 50 {
			t.Errorf("200 sessions: %v", sides)
		}
	})
}

// TestN04SplitWithoutBackendSkipped: a split whose upstream has no
// eligible backend gives its share to the others instead of a 503.
func TestN04SplitWithoutBackendSkipped(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		h := startHarnessConfig(t, n04Config(t, &logSink{}), ListenerConfig{}, proto)
		for range 50 {
			if got := n04Get(t, h, "/skip/x", ""); got != "web-v2" {
				t.Fatalf("got %q", got)
			}
		}
	})
}

// TestSplitConfigRefused: splits the agent's checks refuse are errors of
// New too.
func TestSplitConfigRefused(t *testing.T) {
	for _, sp := range [][]SplitConfig{
		{{"nope", 1}},
		{{"web-v1", 0}, {"web-v2", 0}},
		{{"web-v1", -1}, {"web-v2", 2}},
		{{"web-v1", 1}, {"web-v1", 2}},
	} {
		cfg := n04Config(t, &logSink{})
		cfg.Upstreams[0].Routes[0].Splits = sp
		if _, err := New(cfg); err == nil {
			t.Errorf("splits %v: no error", sp)
		}
	}
}

// TestN04UnhealthySplitSkipped: when web-v2's only backend fails its
// active health check, the canary route's requests all go to web-v1
// (none gets a 503), and web-v2 takes its share again once it passes.
func TestN04UnhealthySplitSkipped(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		var down atomic.Bool
		v2 := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" && down.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("X-Backend", "web-v2")
		}))
		uv2 := staticUpstream("web-v2", "/direct/web-v2/", v2)
		uv2.Active = &health.ActiveConfig{Path: "/health", Interval: 20 * time.Millisecond, Timeout: time.Second,
			HealthyThreshold: 1, UnhealthyThreshold: 1, UnknownIsHealthy: true}
		web := UpstreamConfig{Config: staticUpstream("web", "/").Config, Routes: []RouteConfig{
			{PathPrefix: "/", Splits: []SplitConfig{{"web-v1", 50}, {"web-v2", 50}}}}}
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{web, splitBackend(t, "web-v1"), uv2}}, ListenerConfig{}, proto)
		eligible := func() bool {
			for _, bi := range h.gw.Backends() {
				if bi.Upstream == "web-v2" {
					return bi.Eligible
				}
			}
			return false
		}
		seen := map[string]int{}
		for range 20 {
			seen[n04Get(t, h, "/x", "")]++
		}
		if seen["web-v1"] < 8 || seen["web-v2"] < 8 {
			t.Errorf("both up, 50/50: %v", seen)
		}
		down.Store(true)
		eventually(t, 5*time.Second, func() bool { return !eligible() }, "web-v2's backend unhealthy")
		for range 40 {
			if got := n04Get(t, h, "/x", ""); got != "web-v1" {
				t.Fatalf("web-v2 unhealthy: a request reached %q", got)
			}
		}
		down.Store(false)
		eventually(t, 5*time.Second, eligible, "web-v2's backend healthy again")
		clear(seen)
		for range 20 {
			seen[n04Get(t, h, "/x", "")]++
		}
		if seen["web-v2"] < 8 {
			t.Errorf("web-v2 healthy again: %v", seen)
		}
	})
}

// TestN04SplitKeepsItsRetries: a split's requests get its upstream's
// retries: web-v2 has a backend that refuses connections beside a good
// one, and no request of the canary route fails (a connect failure is
// retried on web-v2's other backend, never sent to web-v1).
func TestN04SplitKeepsItsRetries(t *testing.T) {
	good := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", "web-v2")
	}))
	dead := testbackend.NewH1(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	uv2 := staticUpstream("web-v2", "/direct/web-v2/", dead, good)
	dead.Close()
	web := UpstreamConfig{Config: staticUpstream("web", "/").Config, Routes: []RouteConfig{
		{PathPrefix: "/", Splits: []SplitConfig{{"web-v1", 50}, {"web-v2", 50}}}}}
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{web, splitBackend(t, "web-v1"), uv2}}, ListenerConfig{}, ProtocolH2)
	seen := map[string]int{}
	for range 100 {
		seen[n04Get(t, h, "/x", "")]++ // fails the test on any status but 200
	}
	if seen["web-v1"] < 45 || seen["web-v2"] < 45 {
		t.Errorf("50/50 with a dead web-v2 backend: %v", seen)
	}
}

// TestSplitsReported: /v1/routes (Gateway.Routes) shows a route's splits
// and sticky key; a route without has neither.
func TestSplitsReported(t *testing.T) {
	g, _ := benchGateway(t, benchSplitConfig("cookie:session"))
	var web, v1 *RouteInfo
	routes := g.Routes()
	for i := range routes {
		switch routes[i].Upstream {
		case "web":
			web = &routes[i]
		case "web-v1":
			v1 = &routes[i]
		}
	}
	if web == nil || len(web.Splits) != 2 || web.Splits[1] != (SplitConfig{"web-v2", 10}) || web.Sticky != "cookie:session" {
		t.Errorf("web: %+v", web)
	}
	if v1 == nil || v1.Splits != nil || v1.Sticky != "" {
		t.Errorf("web-v1: %+v", v1)
	}
}

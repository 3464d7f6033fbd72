package gateway

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
)

// TestRoutePolicies: item 6 of the edge-routing issue over every
// ingress. A route's timeouts, retry and rate_limit replace its
// upstream's for that route only: "/slow/" times out at its own 100 ms
// request timeout (504 request_timeout) where the upstream has none;
// "/flaky/" retries a 503 three times where the upstream retries
// nothing; "/limited/" refuses its second request (429) where the
// upstream has no limit; "/other/" keeps the upstream's policies.
func TestRoutePolicies(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		var flaky atomic.Int64
		be := backendOver(t, ProtocolH1, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/slow/x", "/other/slow":
				time.Sleep(300 * time.Millisecond)
			case "/flaky/x", "/other/flaky":
				if flaky.Add(1)%3 != 0 {
					w.WriteHeader(503)
					return
				}
			}
			w.Write([]byte("ok"))
		})
		uc := staticUpstream("web", "/", be)
		off := retry.Default()
		off.Attempts = 1
		uc.Retry = off
		p := retry.Default()
		p.Attempts, p.On, p.Backoff, p.MaxBackoff = 3, retry.Status503, time.Millisecond, time.Millisecond
		uc.Routes = []RouteConfig{
			{PathPrefix: "/slow/", Timeouts: RouteTimeouts{Request: 100 * time.Millisecond}},
			{PathPrefix: "/flaky/", Retry: &p},
			{PathPrefix: "/limited/", RateLimit: &ratelimit.Config{RequestsPerSecond: 0.001, Burst: 1}},
			{PathPrefix: "/other/"},
		}
		m, sink := inmemMetrics()
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{uc}, Metrics: m}, ListenerConfig{}, proto)
		get := func(path string) *http.Response {
			t.Helper()
			resp, err := h.client.Get(h.base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}
		if resp := get("/slow/x"); resp.StatusCode != 504 || resp.Header.Get("X-Impulse-Error") != "request_timeout" {
			t.Errorf("/slow/x: %d %v", resp.StatusCode, resp.Header)
		}
		if resp := get("/other/slow"); resp.StatusCode != 200 {
			t.Errorf("/other/slow: %d", resp.StatusCode)
		}
		flaky.Store(0)
		if resp := get("/flaky/x"); resp.StatusCode != 200 || flaky.Load() != 3 {
			t.Errorf("/flaky/x: %d after %d tries", resp.StatusCode, flaky.Load())
		}
		flaky.Store(0)
		if resp := get("/other/flaky"); resp.StatusCode != 503 || flaky.Load() != 1 {
			t.Errorf("/other/flaky: %d after %d tries", resp.StatusCode, flaky.Load())
		}
		if resp := get("/limited/a"); resp.StatusCode != 200 {
			t.Errorf("/limited/ first: %d", resp.StatusCode)
		}
		if resp := get("/limited/b"); resp.StatusCode != 429 || resp.Header.Get("X-Impulse-Error") != "rate_limited" {
			t.Errorf("/limited/ second: %d %v", resp.StatusCode, resp.Header)
		}
		for range 3 {
			if resp := get("/other/x"); resp.StatusCode != 200 {
				t.Errorf("/other/x: %d", resp.StatusCode)
			}
		}
		if n := counterSum(h.gw, sink, "impulse.rate.limited", map[string]string{"scope": "route"}); n != 1 {
			t.Errorf("impulse_rate_limited{scope=route} = %v, want 1", n)
		}
	})
}

// TestRoutePolicyRefused: a route's response_header longer than its
// upstream's is refused by Apply (the upstream's still bounds HTTP/1.1
// connections); an invalid rate limit or retry policy too.
func TestRoutePolicyRefused(t *testing.T) {
	for name, rc := range map[string]RouteConfig{
		"response_header": {PathPrefix: "/", Timeouts: RouteTimeouts{ResponseHeader: time.Minute}},
		"rate_limit":      {PathPrefix: "/", RateLimit: &ratelimit.Config{}},
		"retry":           {PathPrefix: "/", Retry: &retry.Policy{Attempts: 99}},
	} {
		uc := staticUpstream("web", "/")
		uc.Routes = []RouteConfig{rc}
		if g, err := New(Config{Upstreams: []UpstreamConfig{uc}}); err == nil {
			g.Shutdown(t.Context())
			t.Errorf("%s: no error", name)
		}
	}
}

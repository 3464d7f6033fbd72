package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestResponseCounts: every recorded response is counted by class on its
// upstream and its backend, over each ingress; a gateway-produced 5xx (a
// backend that refuses connections: 502) also counts as an error. The
// upstream's counts survive a reload that rebuilds it, and counting
// allocates nothing.
func TestResponseCounts(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/ok/missing" {
				w.WriteHeader(http.StatusNotFound)
			}
		}))
		defer ok.Close()
		dead := httptest.NewServer(http.NotFoundHandler())
		dead.Close() // connections refused
		up := staticUpstream("ok", "/ok", ok)
		h := newHarnessOver(t, proto, up, staticUpstream("dead", "/dead", dead))
		for _, path := range []string{"/ok/a", "/ok/b", "/ok/missing", "/dead/x", "/nowhere"} {
			resp := h.get(path)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		got := h.gw.Traffic()
		if got["ok"] != (upstream.ResponseCounts{Success: 2, ClientError: 1}) {
			t.Errorf("upstream ok: %+v", got["ok"])
		}
		if got["dead"] != (upstream.ResponseCounts{ServerError: 1, Errors: 1}) {
			t.Errorf("upstream dead: %+v", got["dead"])
		}
		bs := map[string]BackendInfo{}
		for _, b := range h.gw.Backends() {
			bs[b.Upstream] = b
		}
		// The dead backend's two tries (the default retry goes to the
		// same backend when no other is eligible) are both counted on it.
		if bs["ok"].Responses != got["ok"] || bs["dead"].Responses != (upstream.ResponseCounts{ServerError: 2, Errors: 2}) {
			t.Errorf("backend counts: ok %+v, dead %+v", bs["ok"].Responses, bs["dead"].Responses)
		}
		for _, u := range h.gw.Upstreams() {
			if u.Responses != got[u.Name] {
				t.Errorf("/v1/upstreams %s: %+v", u.Name, u.Responses)
			}
		}

		// Another timeout rebuilds the upstream: its counts carry over.
		up.ConnectTimeout = 5 * time.Second
		if err := h.gw.applyUpstreams([]UpstreamConfig{up}); err != nil {
			t.Fatal(err)
		}
		resp := h.get("/ok/c")
		resp.Body.Close()
		if got := h.gw.Traffic(); len(got) != 1 || got["ok"].Success != 3 {
			t.Errorf("after the reload: %+v", got)
		}
	})
}

// TestResponseCountsCountRetriedTries: a backend whose every answer is a
// 503 that a retry hides still shows its 503s on the status page, and a
// refused connection shows as a gateway-made 502 on its backend; the
// upstream counts what the clients got.
func TestResponseCountsCountRetriedTries(t *testing.T) {
	bad := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
	good := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	up := staticUpstream("u", "/", bad, good)
	up.Static = append(up.Static, closedPort(t, "dead", "http"))
	up.Retry = retryOn(3, retry.ConnectFailure, retry.Status503)
	h := newHarnessOver(t, ProtocolH1, up)
	for range 12 {
		resp := h.get("/")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	bs := map[string]upstream.ResponseCounts{}
	for _, b := range h.gw.Backends() {
		bs[b.ID] = b.Responses
	}
	if c := bs["0"]; c.ServerError == 0 || c.Errors != 0 {
		t.Errorf("the 503 backend: %+v, want its 503s counted, not as the gateway's", c)
	}
	if c := bs["dead"]; c.ServerError == 0 || c.Errors != c.ServerError {
		t.Errorf("the refusing backend: %+v, want gateway-made 5xx", c)
	}
	if c := h.gw.Traffic()["u"]; c != (upstream.ResponseCounts{Success: 12}) {
		t.Errorf("upstream: %+v, want 12 successes", c)
	}
}

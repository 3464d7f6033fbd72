package gateway

import (
	"crypto/sha256"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/auth"
	"github.com/impulse-agent/impulse-agent/gateway/compress"
	"github.com/impulse-agent/impulse-agent/gateway/cors"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/internal/credfile"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// corsFieldsOf are the Access-Control-* fields of h.
func corsFieldsOf(h http.Header) []string {
	var out []string
	for k := range h {
		if strings.HasPrefix(k, "Access-Control-") {
			out = append(out, k)
		}
	}
	return out
}

// TestN08CORSPreflightAtTheEdge: case N08 over every ingress. A
// preflight from the allowed origin gets 204 with the allow fields
// without reaching the backend (also on a route behind api_keys: a
// preflight carries no credentials, and is routed by the method it
// announces); one from another origin, or for another method, gets 403
// cors_denied and no CORS field. Actual requests are proxied whatever
// their origin: the allowed one gets its origin back, the backend's own
// CORS fields are replaced, and Vary: Origin is set on all.
func TestN08CORSPreflightAtTheEdge(t *testing.T) {
	const app = "https://app.example.com"
	forEachProtocol(t, func(t *testing.T, proto string) {
		var hits atomic.Int64
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("Access-Control-Allow-Origin", "*") // the backend's own: the gateway's policy replaces it
			w.Header().Set("X-Trace", "t1")
			w.Write([]byte("ok"))
		}))
		policy := &cors.Config{AllowOrigins: []string{app}, AllowMethods: []string{"GET", "PUT"}, MaxAge: 10 * time.Minute}
		uc := staticUpstream("web", "/", be)
		uc.Routes = []RouteConfig{
			{PathPrefix: "/api/", Methods: []string{"GET", "PUT"}, CORS: policy},
			{PathPrefix: "/private/", CORS: &cors.Config{AllowOrigins: []string{app}, AllowHeaders: []string{"X-Api-Key"},
				ExposeHeaders: []string{"X-Trace"}, AllowCredentials: true},
				Auth: auth.Config{APIKeys: &auth.APIKeysConfig{Header: "X-Api-Key",
					Keys: []credfile.Key{{Name: "ci", Digest: sha256.Sum256([]byte("k-N08"))}}}}},
		}
		h := newHarnessOver(t, proto, uc)
		do := func(method, path string, hdr ...string) *http.Response {
			t.Helper()
			req, _ := http.NewRequest(method, h.base+path, nil)
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			resp.Body.Close()
			return resp
		}

		resp := do("OPTIONS", "/api/items/1", "Origin", app, "Access-Control-Request-Method", "PUT")
		if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != app ||
			resp.Header.Get("Access-Control-Allow-Methods") != "GET, PUT" || resp.Header.Get("Access-Control-Max-Age") != "600" ||
			!strings.Contains(resp.Header.Get("Vary"), "Origin") || resp.Header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("allowed preflight: %d %v", resp.StatusCode, resp.Header)
		}
		for _, hdr := range [][]string{
			{"Origin", "https://evil.example.com", "Access-Control-Request-Method", "PUT"},
			{"Origin", app, "Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "x-other"},
		} {
			resp = do("OPTIONS", "/api/items/1", hdr...)
			if resp.StatusCode != 403 || resp.Header.Get("X-Impulse-Error") != "cors_denied" || len(corsFieldsOf(resp.Header)) != 0 {
				t.Errorf("refused preflight %q: %d %v", hdr, resp.StatusCode, resp.Header)
			}
		}
		// DELETE is no route's method here: routed as a plain OPTIONS,
		// which /api/ does not take either.
		if resp = do("OPTIONS", "/api/items/1", "Origin", app, "Access-Control-Request-Method", "DELETE"); resp.StatusCode != 404 || len(corsFieldsOf(resp.Header)) != 0 {
			t.Errorf("preflight for DELETE: %d %v", resp.StatusCode, resp.Header)
		}
		// Behind api_keys: the preflight has no key, and is answered.
		resp = do("OPTIONS", "/private/x", "Origin", app, "Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "x-api-key")
		if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != app || resp.Header.Get("Access-Control-Allow-Credentials") != "true" ||
			resp.Header.Get("Access-Control-Allow-Headers") != "X-Api-Key" {
			t.Errorf("preflight behind api_keys: %d %v", resp.StatusCode, resp.Header)
		}
		if n := hits.Load(); n != 0 {
			t.Fatalf("%d preflights reached the backend", n)
		}

		resp = do("GET", "/api/items/1", "Origin", app)
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != app || resp.Header.Get("Vary") != "Origin" {
			t.Errorf("allowed GET: %d %v", resp.StatusCode, resp.Header)
		}
		resp = do("GET", "/api/items/1", "Origin", "https://evil.example.com")
		if resp.StatusCode != 200 || len(corsFieldsOf(resp.Header)) != 0 || resp.Header.Get("Vary") != "Origin" {
			t.Errorf("GET from another origin: %d %v", resp.StatusCode, resp.Header)
		}
		resp = do("GET", "/api/items/1")
		if resp.StatusCode != 200 || len(corsFieldsOf(resp.Header)) != 0 || resp.Header.Get("Vary") != "Origin" {
			t.Errorf("GET without Origin: %d %v", resp.StatusCode, resp.Header)
		}
		resp = do("GET", "/private/x", "Origin", app, "X-Api-Key", "k-N08")
		if resp.StatusCode != 200 || resp.Header.Get("Access-Control-Allow-Origin") != app ||
			resp.Header.Get("Access-Control-Allow-Credentials") != "true" || resp.Header.Get("Access-Control-Expose-Headers") != "X-Trace" {
			t.Errorf("GET with credentials: %d %v", resp.StatusCode, resp.Header)
		}
		// The gateway's own answer can be read by the page too.
		resp = do("GET", "/private/x", "Origin", app)
		if resp.StatusCode != 401 || resp.Header.Get("Access-Control-Allow-Origin") != app {
			t.Errorf("401 without a key: %d %v", resp.StatusCode, resp.Header)
		}
		if n := hits.Load(); n != 4 {
			t.Errorf("%d requests reached the backend, want 4", n)
		}
		for _, ri := range h.gw.Routes() {
			if !ri.CORS || ri.Compress != nil {
				t.Errorf("/v1/routes: %+v", ri)
			}
		}
	})
}

// TestN08CredentialsWithAnyOrigin: credentials with "*" is refused by
// Apply (hcl refuses it first, at its file:line:column).
func TestN08CredentialsWithAnyOrigin(t *testing.T) {
	uc := memUpstream(1)
	uc.Routes[0].CORS = &cors.Config{AllowOrigins: []string{"*"}, AllowCredentials: true}
	if _, err := New(Config{Upstreams: []UpstreamConfig{uc}}); err == nil || !strings.Contains(err.Error(), "allow_credentials") {
		t.Fatalf("New: %v", err)
	}
}

// TestEdgeStagesTogether: on a route with cors, compress and a rate
// limit, over every ingress: a preflight takes a rate-limit token (the
// next one gets 429), and an encoded response varies by both Origin and
// Accept-Encoding.
func TestEdgeStagesTogether(t *testing.T) {
	const app = "https://app.example.com"
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Vary", "Cookie")
			w.Write(n07JSON)
		}))
		uc := staticUpstream("web", "/", be)
		uc.Routes[0].CORS = &cors.Config{AllowOrigins: []string{app}}
		uc.Routes[0].Compress = &compress.Config{}
		h := newHarnessOver(t, proto, uc)
		req, _ := http.NewRequest("GET", h.base+"/x", nil)
		req.Header.Set("Origin", app)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if v := resp.Header.Values("Vary"); resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("Access-Control-Allow-Origin") != app ||
			strings.Join(v, ", ") != "Cookie, Origin, Accept-Encoding" {
			t.Errorf("GET: %q, ACAO %q, Vary %q", resp.Header.Get("Content-Encoding"), resp.Header.Get("Access-Control-Allow-Origin"), v)
		}

		limited := staticUpstream("web", "/", be)
		limited.Routes[0].CORS = uc.Routes[0].CORS
		limited.RateLimit = &ratelimit.Config{RequestsPerSecond: 0.001, Burst: 1}
		if err := h.gw.applyUpstreams([]UpstreamConfig{limited}); err != nil {
			t.Fatal(err)
		}
		for i, want := range []int{204, 429} {
			req, _ := http.NewRequest("OPTIONS", h.base+"/x", nil)
			req.Header.Set("Origin", app)
			req.Header.Set("Access-Control-Request-Method", "GET")
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("preflight %d: %d; want %d", i, resp.StatusCode, want)
			}
		}
	})
}

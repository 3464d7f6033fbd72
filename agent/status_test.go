package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// statusConfig is baseConfig with a control token and an upstream "web"
// of two backends under an active health check: "good" passes, "bad"
// answers 503 to it.
func statusConfig(t *testing.T, token string) (cfg string, good, bad *httptest.Server) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good = backend(t, "good")
	bad = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(bad.Close)
	cfg = strings.Replace(baseConfig, `address = "127.0.0.1:0"
}`, fmt.Sprintf("address = \"127.0.0.1:0\"\n  token_file = %q\n}", tokenFile), 1) + fmt.Sprintf(`
upstream "web" {
  route {
    path_prefix = "/"
  }
  health_check {
    path                = "/health"
    interval            = "200ms"
    timeout             = "200ms"
    unhealthy_threshold = 1
    healthy_threshold   = 1
  }
  backend "good" {
    address = %q
  }
  backend "bad" {
    address = %q
  }
}
`, good.URL, bad.URL)
	return cfg, good, bad
}

// do sends method path to the control API with the Authorization value auth
// ("" none).
func (r *running) do(t *testing.T, method, path, auth string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+r.a.ControlAddr().String()+path, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func basic(user, pass string) string {
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(user, pass)
	return req.Header.Get("Authorization")
}

// TestStatusPageAuth: /ui/ follows the API's token rules. Without the
// token (or with a wrong one) it answers 401 with a Basic challenge so a
// browser prompts; Basic with the token as password (any user) or Bearer
// opens it; the page carries its security headers and never the token.
// Basic works for GET and HEAD only: POST /v1/reload with it is 401
// (cross-site request forgery), with Bearer 200.
func TestStatusPageAuth(t *testing.T) {
	const token = "s3cret-token"
	cfg, _, _ := statusConfig(t, token)
	r := start(t, cfg)

	for _, path := range []string{"/ui/", "/ui", "/ui/app.js", "/ui/status.json"} {
		for _, auth := range []string{"", basic("admin", "wrong"), "Bearer wrong", basic(token, "")} {
			resp := r.do(t, "GET", path, auth)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("GET %s with %q: %d, want 401", path, auth, resp.StatusCode)
			}
			if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, `Basic realm="impulse-agent"`) {
				t.Errorf("GET %s: WWW-Authenticate %q, want a Basic challenge", path, got)
			}
			if resp.Header.Get("Content-Security-Policy") == "" {
				t.Errorf("GET %s 401: no Content-Security-Policy", path)
			}
		}
	}
	if resp := r.do(t, "GET", "/v1/status", ""); resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Bearer realm="impulse-agent"` {
		t.Errorf("GET /v1/status without token: %d %q, want 401 with the API's Bearer challenge", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}

	for _, auth := range []string{basic("", token), basic("anyone", token), "Bearer " + token, "basic " + strings.TrimPrefix(basic("x", token), "Basic ")} {
		resp := r.do(t, "GET", "/ui/", auth)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(string(body), `<script src="app.js"`) {
			t.Fatalf("GET /ui/ with %q: %d %s %.80q", auth, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		if strings.Contains(string(body), token) {
			t.Fatal("the page carries the token")
		}
		h := resp.Header
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("Content-Security-Policy %q", csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("security headers: %v", h)
		}
	}
	if resp := r.do(t, "GET", "/ui", basic("u", token)); resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d %q, want a redirect to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
	for path, ctype := range map[string]string{"/ui/app.js": "text/javascript", "/ui/style.css": "text/css", "/ui/status.json": "application/json"} {
		resp := r.do(t, "GET", path, basic("u", token))
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), ctype) || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
	}
	if resp := r.do(t, "HEAD", "/ui/", basic("u", token)); resp.StatusCode != 200 {
		t.Errorf("HEAD /ui/ with Basic: %d", resp.StatusCode)
	}
	if resp := r.do(t, "GET", "/ui/nope", basic("u", token)); resp.StatusCode != 404 {
		t.Errorf("GET /ui/nope: %d, want 404", resp.StatusCode)
	}
	if resp := r.do(t, "GET", "/v1/status", basic("u", token)); resp.StatusCode != 200 {
		t.Errorf("GET /v1/status with Basic: %d", resp.StatusCode)
	}
	// Only Bearer changes anything.
	if resp := r.do(t, "POST", "/v1/reload", basic("u", token)); resp.StatusCode != 401 {
		t.Errorf("POST /v1/reload with Basic: %d, want 401", resp.StatusCode)
	}
	if resp := r.do(t, "POST", "/v1/reload", "Bearer "+token); resp.StatusCode != 200 {
		t.Errorf("POST /v1/reload with Bearer: %d, want 200", resp.StatusCode)
	}
}

// statusOf fetches and decodes /v1/status.
func (r *running) statusOf(t *testing.T, auth string) statusDoc {
	t.Helper()
	resp := r.do(t, "GET", "/v1/status", auth)
	var doc statusDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); resp.StatusCode != 200 || err != nil {
		t.Fatalf("/v1/status: %d %v", resp.StatusCode, err)
	}
	return doc
}

// TestStatusDocument: /v1/status holds the listeners with their
// certificate expiry, the routes with their source, and each upstream's
// backends with health (a failing check makes a row "down" with the last
// check's result and time; the gateway's health, not the configuration),
// and the responses by class, also in the traffic buckets.
func TestStatusDocument(t *testing.T) {
	const token = "tok"
	cfg, _, _ := statusConfig(t, token)
	r := start(t, cfg)
	auth := "Bearer " + token
	var doc statusDoc
	deadline := time.Now().Add(10 * time.Second)
	for {
		doc = r.statusOf(t, auth)
		checked := 0
		for _, b := range doc.Backends {
			if b.LastCheck != nil {
				checked++
			}
		}
		if checked == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backends never checked: %+v", doc.Backends)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		if code, body := r.get(t, r.url("main", "/x")); code != 200 || body != "good" {
			t.Fatalf("GET /x: %d %q", code, body)
		}
	}
	if code, _ := r.get(t, r.url("main", "/x")); code != 200 {
		t.Fatal(code)
	}
	doc = r.statusOf(t, auth)

	if len(doc.Listeners) != 1 || doc.Listeners[0].Name != "main" || len(doc.Listeners[0].Protocols) != 3 ||
		doc.Listeners[0].UDPAddress == "" || doc.Listeners[0].TCPAddress == "" {
		t.Fatalf("listeners: %+v", doc.Listeners)
	}
	certs := doc.Listeners[0].Certificates
	if len(certs) != 1 || certs[0].Name != "default" || time.Until(certs[0].NotAfter) < time.Hour || certs[0].ExpiresInSeconds < 3600 {
		t.Errorf("certificates: %+v", certs)
	}
	if len(doc.Routes) != 1 || doc.Routes[0].Upstream != "web" || doc.Routes[0].Source != "hcl" {
		t.Errorf("routes: %+v", doc.Routes)
	}
	if len(doc.Upstreams) != 1 || doc.Upstreams[0].Name != "web" || doc.Upstreams[0].BackendsUp != 1 || doc.Upstreams[0].BackendsTotal != 2 {
		t.Fatalf("upstreams: %+v", doc.Upstreams)
	}
	if got := doc.Upstreams[0].Responses; got.Success != 6 || got.Total() != 6 {
		t.Errorf("upstream responses: %+v, want 6 2xx", got)
	}
	rows := map[string]statusBackend{}
	for _, b := range doc.Backends {
		rows[b.ID] = b
	}
	good, bad := rows["good"], rows["bad"]
	if good.Status != "up" || good.Health != "healthy" || good.LastCheck == nil || !good.LastCheck.OK || good.Responses.Success != 6 ||
		good.ConfiguredWeight != good.Weight || good.LastChange == nil || good.Requests != 6 {
		t.Errorf("good row: %+v", good)
	}
	if bad.Status != "down" || bad.StatusReason != "status 503" || bad.LastCheck == nil || bad.LastCheck.OK || bad.LastCheck.Reason != "status 503" ||
		time.Since(bad.LastCheck.At) > 5*time.Second || bad.FailedChecks < 1 || bad.Responses.Total() != 0 {
		t.Errorf("bad row: %+v (last check %+v)", bad, bad.LastCheck)
	}
	if len(doc.Traffic.Buckets) == 0 || doc.Traffic.BucketSeconds != 5 {
		t.Fatalf("traffic: %+v", doc.Traffic)
	}
	var counted uint64
	for _, b := range doc.Traffic.Buckets {
		counted += b.Counts["web"].Success
	}
	if counted != 6 {
		t.Errorf("traffic buckets count %d 2xx, want 6: %+v", counted, doc.Traffic.Buckets)
	}
	if len(doc.Watches) != 0 || !doc.Ready.Ready || doc.Ready.Status != "ok" {
		t.Errorf("watches %+v, ready %+v", doc.Watches, doc.Ready)
	}
}

// TestTrafficRing: each tick closes a bucket of the counts since the last
// (the first since the ring's start, from what was counted then; a counter that went down counts from
// 0), a tick before a bucket is due does nothing, the ring keeps the last
// n, and the document ends with the bucket being filled.
func TestTrafficRing(t *testing.T) {
	cur := map[string]upstream.ResponseCounts{"a": {Success: 10}}
	t0 := time.Unix(1000, 0)
	ring := newTrafficRing(func() map[string]upstream.ResponseCounts {
		m := map[string]upstream.ResponseCounts{}
		for k, v := range cur {
			m[k] = v
		}
		return m
	}, 5*time.Second, 3, t0)
	cur["a"] = upstream.ResponseCounts{Success: 12}
	if d := ring.doc(t0.Add(time.Second)); len(d.Buckets) != 1 || !d.Buckets[0].Partial || d.Buckets[0].Counts["a"].Success != 2 {
		t.Fatalf("before the first bucket: %+v", d.Buckets)
	}
	cur["a"] = upstream.ResponseCounts{Success: 15, ServerError: 2, Errors: 1}
	ring.tick(t0.Add(time.Second)) // not due
	ring.tick(t0.Add(5 * time.Second))
	d := ring.doc(t0.Add(5 * time.Second))
	if len(d.Buckets) != 1 || d.Buckets[0].Counts["a"] != (upstream.ResponseCounts{Success: 5, ServerError: 2, Errors: 1}) || d.Buckets[0].Seconds != 5 {
		t.Fatalf("one bucket: %+v", d.Buckets)
	}
	cur["a"] = upstream.ResponseCounts{Success: 3} // replaced counter
	cur["b"] = upstream.ResponseCounts{ClientError: 4}
	for i := 2; i <= 4; i++ {
		ring.tick(t0.Add(time.Duration(i) * 5 * time.Second))
	}
	d = ring.doc(t0.Add(22 * time.Second))
	if len(d.Buckets) != 4 || !d.Buckets[3].Partial || d.Buckets[3].Seconds != 2 {
		t.Fatalf("3 closed and 1 partial bucket: %+v", d.Buckets)
	}
	if got := d.Buckets[0].Counts; got["a"] != (upstream.ResponseCounts{Success: 3}) || got["b"] != (upstream.ResponseCounts{ClientError: 4}) {
		t.Errorf("bucket after the reset: %+v", got)
	}
	if !d.Buckets[0].End.Equal(t0.Add(10*time.Second)) || d.Buckets[2].Counts["a"] != (upstream.ResponseCounts{}) {
		t.Errorf("ring order: %+v", d.Buckets)
	}
}

package gateway

import (
	"net/http"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/headers"
	"github.com/impulse-agent/impulse-agent/gateway/rewrite"
)

// TestN02HeaderRules: case N02 over every ingress. request_headers set
// X-Env and a value with the client's IP and the request ID, and remove
// X-Debug; response_headers set Strict-Transport-Security and remove
// Server. The backend sees the request's, the client the response's, on
// the backend's answers and on the gateway's own after routing (a 502
// here). Config errors (Connection, Host, pseudo-headers) are
// TestRulesRefused (gateway/headers) and the hcl tests.
func TestN02HeaderRules(t *testing.T) {
	const hsts = "max-age=63072000"
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := targetEcho(t, "X-Env", "X-Debug", "X-Client", "Via")
		uc := staticUpstream("web", "/", be)
		uc.Routes = []RouteConfig{{PathPrefix: "/",
			RequestHeaders: headers.Config{Set: map[string]string{"X-Env": "prod", "X-Client": "{client_ip} {request_id} {scheme} {route}"},
				Add: map[string]string{"Via": "impulse"}, Remove: []string{"X-Debug"}},
			ResponseHeaders: headers.Config{Set: map[string]string{"Strict-Transport-Security": hsts}, Remove: []string{"Server"}},
		}}
		down := staticUpstream("down", "/down/", be)
		down.Static[0].Port = 1 // nothing listens: the gateway answers 502
		down.Routes[0].ResponseHeaders = uc.Routes[0].ResponseHeaders
		h := newHarnessOver(t, proto, uc, down)

		req, _ := http.NewRequest("GET", h.base+"/a", nil)
		req.Header.Set("X-Debug", "1")
		req.Header.Set("X-Env", "dev")
		req.Header.Set("X-Request-Id", "req-N02")
		req.Header.Set("Via", "1.1 corp-proxy")
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		const ip = "127.0.0.1" // the test client
		if got := resp.Header; got.Get("X-Got-X-Env") != "prod" || got.Get("X-Got-X-Debug") != "" ||
			got.Get("X-Got-X-Client") != ip+" req-N02 https /" || got.Get("X-Got-Via") != "1.1 corp-proxy | impulse" {
			t.Errorf("the backend got %v", got)
		}
		if resp.Header.Get("Strict-Transport-Security") != hsts || resp.Header.Get("Server") != "" {
			t.Errorf("the client got %v", resp.Header)
		}
		resp, err = h.client.Get(h.base + "/down/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 502 || resp.Header.Get("Strict-Transport-Security") != hsts {
			t.Errorf("gateway answer: %d %v", resp.StatusCode, resp.Header)
		}
	})
}

// TestN03RouteRedirect: case N03's route redirect over every ingress
// (the port-80 listener is the mesh work's). A redirect route answers
// without an upstream (its upstream has no backend): 301 to the target
// with the path and query; a route with a target path replaces its prefix
// and may drop the query; HEAD and POST get the same answer, and 307/308
// keep the method by definition (RFC 9110 §15.4.8, §15.4.9).
func TestN03RouteRedirect(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		uc := UpstreamConfig{Routes: []RouteConfig{
			{PathPrefix: "/", Redirect: &rewrite.RedirectConfig{To: "https://new.example.com", Code: 301}},
			{PathPrefix: "/old/", Redirect: &rewrite.RedirectConfig{To: "https://new.example.com/new/", Code: 308, StripQuery: true},
				ResponseHeaders: headers.Config{Set: map[string]string{"Cache-Control": "max-age=60"}}},
		}}
		uc.Name = "moved"
		h := newHarnessOver(t, proto, uc)
		noFollow := *h.client
		noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		for _, c := range []struct {
			method, path string
			code         int
			loc          string
		}{
			{"GET", "/a?b", 301, "https://new.example.com/a?b"},
			{"HEAD", "/a/../c", 301, "https://new.example.com/c"},
			{"POST", "/old/x?q=1", 308, "https://new.example.com/new/x"},
			{"HEAD", "/old/", 308, "https://new.example.com/new/"},
		} {
			req, _ := http.NewRequest(c.method, h.base+c.path, nil)
			resp, err := noFollow.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.code || resp.Header.Get("Location") != c.loc || resp.Header.Get("X-Request-Id") == "" {
				t.Errorf("%s %s: %d %v, want %d to %s", c.method, c.path, resp.StatusCode, resp.Header, c.code, c.loc)
			}
			if c.code == 308 && resp.Header.Get("Cache-Control") != "max-age=60" {
				t.Errorf("%s %s: response_headers not applied: %v", c.method, c.path, resp.Header)
			}
		}
	})
}

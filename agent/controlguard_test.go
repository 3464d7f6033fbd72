package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestSecurityControlBrowserSafe backs SECURITY.md's control API claims
// about browsers: without a token a Host other than an IP or localhost is
// refused (DNS rebinding), and a POST from another origin is refused with
// or without a token (cross-site request forgery), while curl-style
// requests pass.
func TestSecurityControlBrowserSafe(t *testing.T) {
	cases := []struct {
		method, host, origin string
		token                bool
		refused              bool
	}{
		{"GET", "127.0.0.1:9901", "", false, false},
		{"GET", "localhost:9901", "", false, false},
		{"GET", "[::1]:9901", "", false, false},
		{"GET", "evil.example:9901", "", false, true},
		{"GET", "evil.example:9901", "", true, false},
		{"POST", "127.0.0.1:9901", "", false, false},
		{"POST", "127.0.0.1:9901", "http://127.0.0.1:9901", false, false},
		{"POST", "127.0.0.1:9901", "https://evil.example", false, true},
		{"POST", "127.0.0.1:9901", "https://evil.example", true, true},
		{"POST", "127.0.0.1:9901", "null", false, true},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, "http://"+c.host+"/v1/reload", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if got := browserSafe(r, c.token) != ""; got != c.refused {
			t.Errorf("%s Host %s Origin %q token %v: refused %v, want %v", c.method, c.host, c.origin, c.token, got, c.refused)
		}
	}
	// Through the real control API of a running agent.
	ra := start(t, baseConfig)
	req, _ := http.NewRequest("POST", "http://"+ra.a.ControlAddr().String()+"/v1/reload", nil)
	req.Header.Set("Origin", "https://evil.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-site POST /v1/reload: %d, want 403", resp.StatusCode)
	}
	req, _ = http.NewRequest("GET", "http://"+ra.a.ControlAddr().String()+"/v1/backends", nil)
	req.Host = "rebound.example"
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET with a rebound Host: %d, want 403", resp.StatusCode)
	}
}

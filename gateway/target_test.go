package gateway

import (
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

func TestValidRequestTarget(t *testing.T) {
	for target, want := range map[string]bool{
		"/":                      true,
		"*":                      true,
		"/a/b?x=1&y=%2F":         true,
		"/search?q=a+b&r[1]=|":   true,
		"/caf\xc3\xa9":           true,
		"/%E2%82%AC?x=%e2%82%ac": true,
		"/a b":                   false,
		"/a?q=a b":               false,
		"/a#frag":                false,
		"/a\x00":                 false,
		"/a\tb":                  false,
		"/a\x7f":                 false,
		"":                       false,
		"a/b":                    false,
	} {
		if got := validRequestTarget(target); got != want {
			t.Errorf("validRequestTarget(%q) = %v, want %v", target, got, want)
		}
	}
}

// TestInvalidPathIs400: a :path with a space or a fragment is answered 400
// invalid_path and never forwarded (rewritten) to a backend.
func TestInvalidPathIs400(t *testing.T) {
	var hits atomic.Int64
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	h := newHarness(t, staticUpstream("u", "/", be))
	base, _ := url.Parse(h.base)
	for _, p := range []string{"/a b", "/a#frag"} {
		req := &http.Request{Method: "GET", Host: base.Host, Header: http.Header{},
			URL: &url.URL{Scheme: "https", Host: base.Host, Opaque: p}}
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatalf("%q: %v", p, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 || resp.Header.Get("X-Impulse-Error") != "invalid_path" {
			t.Fatalf("%q: %d %q, want 400 invalid_path", p, resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the backend received %d requests", n)
	}
}

// TestEmptyQueryIsKept: "/x?" reaches the backend as "/x?", not "/x".
func TestEmptyQueryIsKept(t *testing.T) {
	got := make(chan string, 1)
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.RequestURI }))
	h := newHarness(t, staticUpstream("u", "/", be))
	resp := h.get("/x?")
	resp.Body.Close()
	if uri := <-got; uri != "/x?" {
		t.Fatalf("backend got %q, want /x?", uri)
	}
}

// TestValidAuthority: host [":" port] by RFC 3986 §3.2.2–3.2.3, host
// required (RFC 9110 §4.2.2).
func TestValidAuthority(t *testing.T) {
	for _, a := range []string{"", "localhost", "www.example.com", "www.example.com:443", "127.0.0.1:8443", "[::1]", "[::1]:8443",
		"[2001:db8::1]:1", "xn--caf-dma.example", "a..example.com", "h:65535", "www.example.com."} {
		if !validAuthority(a) {
			t.Errorf("validAuthority(%q) = false, want true", a)
		}
	}
	for _, a := range []string{"a b", "a/b", "a?b", `a"b`, "www.example.com:abc", "[www.example.com", "[::1", "[::1]x", "[::1]:",
		"[fe80::1%25eth0]", "[127.0.0.1]", "w%77w.example.com", "[v1.x]", ":443", "localhost:99999", "localhost:", "h:1:2", "::1", "h]:80", "h:123456"} {
		if validAuthority(a) {
			t.Errorf("validAuthority(%q) = true, want false", a)
		}
	}
}

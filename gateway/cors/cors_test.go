package cors

import (
	"net/http"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/edgerules"
)

func policy(t *testing.T, c Config) *Policy {
	t.Helper()
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func preflight(origin, method, headers string) http.Header {
	h := http.Header{"Origin": {origin}, "Access-Control-Request-Method": {method}}
	if headers != "" {
		h["Access-Control-Request-Headers"] = []string{headers}
	}
	return h
}

// TestPreflight: case N08's policy; what is allowed gets the allow
// fields, anything else none.
func TestPreflight(t *testing.T) {
	p := policy(t, Config{AllowOrigins: []string{"https://app.example.com"}, AllowMethods: []string{"GET", "PUT"},
		AllowHeaders: []string{"Content-Type", "X-Token"}, MaxAge: 10 * time.Minute})
	for _, c := range []struct {
		req  http.Header
		want bool
	}{
		{preflight("https://app.example.com", "PUT", ""), true},
		{preflight("https://app.example.com", "POST", "content-type,x-token"), true},
		{preflight("https://app.example.com", "DELETE", ""), false},
		{preflight("https://app.example.com", "PUT", "x-other"), false},
		{preflight("https://evil.example.com", "PUT", ""), false},
		{preflight("https://APP.example.com", "PUT", ""), false},
		{preflight("null", "GET", ""), false},
		{http.Header{"Origin": {"https://app.example.com", "https://app.example.com"}, "Access-Control-Request-Method": {"GET"}}, false},
	} {
		h := http.Header{}
		if got := p.Preflight(c.req, h); got != c.want {
			t.Errorf("%v: %v; want %v", c.req, got, c.want)
		}
		if c.want {
			if h.Get("Access-Control-Allow-Origin") != "https://app.example.com" || h.Get("Access-Control-Allow-Methods") != "GET, PUT" ||
				h.Get("Access-Control-Allow-Headers") != "Content-Type, X-Token" || h.Get("Access-Control-Max-Age") != "600" ||
				h.Get("Access-Control-Allow-Credentials") != "" {
				t.Errorf("%v: fields %v", c.req, h)
			}
		} else if len(h) != 1 || h.Get("Vary") == "" {
			t.Errorf("%v: refused, yet fields %v", c.req, h)
		}
	}
}

// TestRespond: the actual request's fields; the backend's own go.
func TestRespond(t *testing.T) {
	p := policy(t, Config{AllowOrigins: []string{"https://app.example.com:443", "http://localhost:3000"},
		ExposeHeaders: []string{"X-Request-Id"}, AllowCredentials: true})
	h := http.Header{"Access-Control-Allow-Origin": {"*"}, "Vary": {"Accept-Encoding"}}
	p.Respond(http.Header{"Origin": {"https://app.example.com"}}, h)
	if h.Get("Access-Control-Allow-Origin") != "https://app.example.com" || h.Get("Access-Control-Allow-Credentials") != "true" ||
		h.Get("Access-Control-Expose-Headers") != "X-Request-Id" || len(h["Vary"]) != 2 || h["Vary"][1] != "Origin" {
		t.Errorf("allowed: %v", h)
	}
	h = http.Header{"Access-Control-Allow-Origin": {"*"}}
	p.Respond(http.Header{"Origin": {"https://evil.example.com"}}, h)
	if len(h) != 1 || h.Get("Vary") != "Origin" {
		t.Errorf("refused: %v", h)
	}
	h = http.Header{}
	p.Respond(http.Header{}, h)
	if len(h) != 1 || h.Get("Vary") != "Origin" {
		t.Errorf("no origin: %v", h)
	}
	h = http.Header{}
	p.Respond(http.Header{"Origin": {"http://localhost:3000"}}, h)
	if h.Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Errorf("port: %v", h)
	}
	any := policy(t, Config{AllowOrigins: []string{"*"}})
	h = http.Header{}
	any.Respond(http.Header{"Origin": {"https://x.example"}}, h)
	if h.Get("Access-Control-Allow-Origin") != "*" || h.Get("Vary") != "" {
		t.Errorf("any: %v", h)
	}
}

func TestNewErrors(t *testing.T) {
	for _, c := range []Config{
		{AllowOrigins: []string{"*"}, AllowCredentials: true},
		{AllowOrigins: []string{"https://a.example"}, AllowHeaders: []string{"*"}, AllowCredentials: true},
		{AllowOrigins: []string{"https://a.example"}, ExposeHeaders: []string{"*"}, AllowCredentials: true},
		{AllowOrigins: []string{"*", "https://a.example"}},
		{AllowOrigins: []string{"app.example.com"}},
		{AllowOrigins: []string{"https://app.example.com/"}},
		{AllowOrigins: []string{"https://*.example.com"}},
		{AllowOrigins: []string{"null"}},
		{AllowOrigins: []string{"https://u@a.example"}},
		{AllowOrigins: []string{"https://a.example:99999"}},
		{AllowMethods: []string{"TRACE"}},
		{AllowMethods: []string{"put"}},
		{AllowMethods: []string{"G T"}},
		{AllowHeaders: []string{"X Bad"}},
		{MaxAge: 1500 * time.Millisecond},
		{MaxAge: 48 * time.Hour},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v): no error", c)
		}
	}
}

func TestCheckOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"https://App.Example.com":     "https://app.example.com",
		"https://app.example.com:443": "https://app.example.com",
		"http://app.example.com:8080": "http://app.example.com:8080",
		"http://[::1]:3000":           "http://[::1]:3000",
	} {
		if got, why := edgerules.CheckOrigin(in); got != want || why != "" {
			t.Errorf("CheckOrigin(%q) = %q, %q; want %q", in, got, why, want)
		}
	}
}

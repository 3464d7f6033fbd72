package discovery

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestRedirectNotFollowed: an answer redirecting elsewhere is a failed
// query (http_307), and the other host never sees the request nor the
// ACL token: http.Client followed redirects with X-Consul-Token (found
// while writing FuzzWatch, whose transport had to drop Location).
func TestRedirectNotFollowed(t *testing.T) {
	var reached atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if r.Header.Get("X-Consul-Token") != "" {
			t.Errorf("the redirect target got the token")
		}
	}))
	t.Cleanup(other.Close)
	consul := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(consul.Close)
	c := newTestClient(t, consul.Listener.Addr().String(), func(c *Config) { c.Token = "s3cret" })
	w := startWatch(t, c, Query{Service: "web"})
	waitFor(t, "a failed query", func() bool {
		st := c.Status()
		return len(st) == 1 && st[0].LastErrorReason == "http_307"
	})
	w.stop(t)
	if n := reached.Load(); n != 0 {
		t.Fatalf("the redirect target got %d requests", n)
	}
	if w.rec.count() != 0 {
		t.Fatalf("a redirect emitted %d snapshots", w.rec.count())
	}
}

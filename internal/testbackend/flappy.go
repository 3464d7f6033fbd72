package testbackend

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// Flappy is an HTTP/1.1 backend whose health can be switched while a test
// runs: /health answers 200 while Healthy holds and 503 once it is
// cleared; every other path answers the backend's name (which one served)
// and counts in Hits (whether traffic reached an unhealthy backend).
type Flappy struct {
	*httptest.Server
	Healthy atomic.Bool
	Hits    atomic.Int64
}

// NewFlappy starts a healthy Flappy answering name, closed at the test's
// end.
func NewFlappy(t testing.TB, name string) *Flappy {
	f := &Flappy{}
	f.Healthy.Store(true)
	f.Server = NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if !f.Healthy.Load() {
				w.WriteHeader(503)
			}
			return
		}
		f.Hits.Add(1)
		io.WriteString(w, name)
	}))
	return f
}

package testbackend

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// Counter counts the requests a backend received, for tests that check
// what reached it and what did not: in all (counted on arrival, before the
// body is read, so a request cut short still counts), per method and
// X-Request-Id, the most body bytes one delivered, and the bodies that
// did not match their X-Body-Len (cut short or padded on the way). The
// zero value is ready.
type Counter struct {
	Total   atomic.Int64
	MaxBody atomic.Int64
	Bad     atomic.Int64 // bodies not as sent

	mu    sync.Mutex
	byKey map[string]int
}

// Note counts r and reads its body to the end (or a failure).
func (c *Counter) Note(r *http.Request) {
	c.Total.Add(1)
	n, _ := io.Copy(io.Discard, r.Body)
	if want := r.Header.Get("X-Body-Len"); want != "" && want != strconv.FormatInt(n, 10) {
		c.Bad.Add(1)
	}
	for {
		m := c.MaxBody.Load()
		if n <= m || c.MaxBody.CompareAndSwap(m, n) {
			break
		}
	}
	c.mu.Lock()
	if c.byKey == nil {
		c.byKey = map[string]int{}
	}
	c.byKey[r.Method+" "+r.Header.Get("X-Request-Id")]++
	c.mu.Unlock()
}

// Of is how many requests arrived with key, "METHOD X-Request-Id".
func (c *Counter) Of(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byKey[key]
}

// OK answers 200 "ok" once it has counted the request.
func OK(c *Counter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c.Note(r)
		io.WriteString(w, "ok")
	}
}

// Reset reads and counts the whole request, then closes the connection
// without an answer: a backend that fails after the request reached it.
func Reset(c *Counter) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c.Note(r)
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}
}

// ConnCounter is a real net/http HTTP/1.1 backend that counts the
// connections it accepted and the ones now closed, to tell a reused
// connection from a new one and see that none is left open.
type ConnCounter struct {
	*httptest.Server
	Opened, Closed atomic.Int32
}

// NewConnCounter starts a ConnCounter serving h, closed at the test's end.
func NewConnCounter(t testing.TB, h http.HandlerFunc) *ConnCounter {
	t.Helper()
	b := &ConnCounter{}
	b.Server = httptest.NewUnstartedServer(h)
	b.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			b.Opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			b.Closed.Add(1)
		}
	}
	b.Start()
	t.Cleanup(b.Close)
	return b
}

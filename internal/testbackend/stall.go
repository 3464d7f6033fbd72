package testbackend

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// Stall is an HTTP/1.1 backend whose requests wait for a token from Free
// (or the end of the test, or their cancellation) before answering 200
// "ok": requests held in flight for as long as a test needs, to fill
// concurrency limits and queues.
type Stall struct {
	*httptest.Server
	Arrived  atomic.Int64 // requests that reached the backend
	release  chan struct{}
	finished chan struct{} // closed at cleanup: every request ends
}

// NewStall starts a Stall, closed at the test's end.
func NewStall(t testing.TB) *Stall {
	s := &Stall{release: make(chan struct{}, 1000), finished: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Arrived.Add(1)
		select {
		case <-s.release:
		case <-s.finished:
		case <-r.Context().Done():
		}
		w.Write([]byte("ok"))
	}))
	t.Cleanup(func() { close(s.finished); s.Server.Close() })
	return s
}

// Free lets n stalled requests (present or future) answer.
func (s *Stall) Free(n int) {
	for range n {
		s.release <- struct{}{}
	}
}

// Slow is a handler that answers "slow" after a delay unless its request
// is canceled first, counting both: the slow backend hedges and per-try
// timeouts are tested against (the canceled tries show the gateway gave
// up on it).
type Slow struct {
	Counter
	Canceled atomic.Int64
	delay    atomic.Int64 // time.Duration: a test changes it while requests run
}

// NewSlow is a Slow answering after d.
func NewSlow(d time.Duration) *Slow {
	s := &Slow{}
	s.SetDelay(d)
	return s
}

// SetDelay changes the delay of the requests that arrive from now on.
func (s *Slow) SetDelay(d time.Duration) { s.delay.Store(int64(d)) }

func (s *Slow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.Note(r)
	select {
	case <-time.After(time.Duration(s.delay.Load())):
		io.WriteString(w, "slow")
	case <-r.Context().Done():
		s.Canceled.Add(1)
	}
}

package reqbody

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// errClientBodyTimeout: a read of the request body waited longer than
// client_body_timeout for the client's next bytes.
var errClientBodyTimeout = errors.New("request body: the client sent nothing for client_body_timeout")

// Stall ends a read of the client's request body that waits longer
// than timeout: the read fails with errClientBodyTimeout. Only time spent
// inside Read counts: a transport that does not read because its backend
// is slow to take the bytes is not the client's stall.
//
// No deadline is set per read (on HTTP/2 each would be a message to the
// connection's serve goroutine): one timer, armed by the first Read,
// looks at the read in progress each time it fires and only then, if that
// read has waited too long, sets a read deadline in the past through the
// ingress's ResponseWriter (http.ResponseController: the TCP connection
// on HTTP/1.1, the stream on HTTP/2 and HTTP/3), which makes the blocked
// read return.
type Stall struct {
	io.ReadCloser
	w       http.ResponseWriter
	timeout time.Duration
	epoch   time.Time
	since   atomic.Int64 // when the read in progress started (ns after epoch, +1); 0: no read
	armed   atomic.Bool
	tripped atomic.Bool
	// n counts the bytes read from the client (for the access log).
	n atomic.Int64

	mu      sync.Mutex // guards timer and stopped; held while the deadline is set
	timer   *time.Timer
	stopped bool
}

// WatchStall puts body under a client_body_timeout watch of timeout,
// whose read deadlines go through w; Stop ends the watch.
func WatchStall(w http.ResponseWriter, body io.ReadCloser, timeout time.Duration) *Stall {
	return &Stall{ReadCloser: body, w: w, timeout: timeout, epoch: time.Now()}
}

func (s *Stall) Read(p []byte) (int, error) {
	if !s.armed.Load() {
		s.armed.Store(true)
		s.mu.Lock()
		if !s.stopped {
			s.timer = time.AfterFunc(s.timeout, s.check)
		}
		s.mu.Unlock()
	}
	s.since.Store(int64(time.Since(s.epoch)) + 1)
	n, err := s.ReadCloser.Read(p)
	s.since.Store(0)
	if n > 0 {
		s.n.Add(int64(n))
	}
	if err != nil && err != io.EOF && s.tripped.Load() {
		return n, errClientBodyTimeout
	}
	return n, err
}

// check runs when the timer fires: it trips a read that has waited for
// timeout, or re-arms the timer for when the read in progress (or the next
// one) would reach it.
func (s *Stall) check() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	next := s.timeout
	if since := s.since.Load(); since != 0 {
		waited := time.Since(s.epoch) - time.Duration(since-1)
		if waited >= s.timeout {
			s.tripped.Store(true)
			// Under mu: stop waits for this, so the ResponseWriter is
			// still the handler's.
			_ = http.NewResponseController(s.w).SetReadDeadline(pastDeadline)
			return
		}
		next = s.timeout - waited
	}
	s.timer.Reset(next)
}

// Received is the number of body bytes read from the client (0 for a nil
// s: no body).
func (s *Stall) Received() int64 {
	if s == nil {
		return 0
	}
	return s.n.Load()
}

// Stop ends the watch; no deadline is set after it returns. A nil s is a
// request without a body.
func (s *Stall) Stop() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
	s.mu.Unlock()
}

package reqbody

import (
	"io"
	"sync"
	"time"
)

// Request bodies longer than coalesceBytes (with a Content-Length) reach the
// backend in chunks of up to coalesceBytes, each passed on once full or
// coalesceWindow after its first bytes arrived, whichever comes first.
const (
	coalesceBytes  = 32 << 10
	coalesceWindow = 20 * time.Millisecond
)

// coalescingBody forwards a large request body in fuller chunks. An HTTP/3
// stream read returns what has arrived, often one or two QUIC packets when
// many uploads share a connection; written to the backend one by one, they
// cost a syscall per ~4 KiB, which was 46% of the agent's CPU under 50
// concurrent 1 MiB uploads. A goroutine reads the client's body into a
// bounded buffer (2 × coalesceBytes); Read hands it on when a chunk is full,
// at the end of the body, or when coalesceWindow has passed since the
// chunk's first bytes, so a client that sends part of a body and then waits
// for the backend is never held up longer than that. Bodies of unknown
// length (streams) are not coalesced.
type coalescingBody struct {
	body  io.ReadCloser
	more  chan struct{} // cap 1: the buffer grew or the body ended
	space chan struct{} // cap 1: Read took bytes out, or Close was called

	mu     sync.Mutex // guards the fields below
	buf    []byte
	since  time.Time // when buf went from empty to not empty
	err    error     // the body's final error (io.EOF at its end)
	closed bool

	timer *time.Timer // Read's window timer; only Read uses it
}

func newCoalescingBody(body io.ReadCloser) *coalescingBody {
	c := &coalescingBody{body: body, more: make(chan struct{}, 1), space: make(chan struct{}, 1),
		buf: make([]byte, 0, 2*coalesceBytes)}
	go c.fill()
	return c
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// fill reads the client's body until it ends, fails or Close is called;
// Close also cancels a read in progress (it closes the HTTP/3 body).
func (c *coalescingBody) fill() {
	tmp := make([]byte, coalesceBytes)
	for {
		n, err := c.body.Read(tmp)
		c.mu.Lock()
		for len(c.buf)+n > cap(c.buf) && !c.closed {
			c.mu.Unlock()
			<-c.space
			c.mu.Lock()
		}
		if c.closed {
			c.mu.Unlock()
			signal(c.more)
			return
		}
		if len(c.buf) == 0 && n > 0 {
			c.since = time.Now()
		}
		c.buf = append(c.buf, tmp[:n]...)
		if err != nil && c.err == nil {
			c.err = err
		}
		c.mu.Unlock()
		signal(c.more)
		if err != nil {
			return
		}
	}
}

// Read returns buffered bytes once there is a chunk's worth (or len(p)),
// the body has ended, or the chunk's window has passed. After the last byte
// it returns the body's error (io.EOF at a clean end).
func (c *coalescingBody) Read(p []byte) (int, error) {
	want := min(len(p), coalesceBytes)
	for {
		c.mu.Lock()
		n, err, since := len(c.buf), c.err, c.since
		if n > 0 && (n >= want || err != nil || time.Since(since) >= coalesceWindow) {
			// Bytes left over keep the chunk's start: they waited as long.
			m := copy(p, c.buf)
			c.buf = c.buf[:copy(c.buf, c.buf[m:])]
			c.mu.Unlock()
			signal(c.space)
			return m, nil
		}
		c.mu.Unlock()
		if n == 0 && err != nil {
			return 0, err
		}
		if n == 0 {
			<-c.more
			continue
		}
		wait := coalesceWindow - time.Since(since)
		if c.timer == nil {
			c.timer = time.NewTimer(wait)
		} else {
			c.timer.Reset(wait)
		}
		select {
		case <-c.more:
			c.timer.Stop()
		case <-c.timer.C:
		}
	}
}

// Close stops the reader goroutine and closes the client's body; a Read
// in progress returns io.ErrClosedPipe.
func (c *coalescingBody) Close() error {
	c.mu.Lock()
	c.closed = true
	if c.err == nil {
		c.err = io.ErrClosedPipe
	}
	c.mu.Unlock()
	signal(c.space)
	signal(c.more)
	return c.body.Close()
}

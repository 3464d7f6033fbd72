package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// fuzzConn is the server side of an in-memory client connection whose
// client sent input and then waits: Read hands out input, then blocks
// until the client hangs up (then io.EOF), the server closes it or a read
// deadline passes (os.ErrDeadlineExceeded, as net/http needs to abort its
// background read). Writes are kept (up to a cap) and never block. It
// knows when the server can make no more progress without more input: it
// waits in Read with the input consumed and no request in flight.
type fuzzConn struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at every change of what follows
	input    []byte
	pos      int
	out      []byte
	blocked  int // Reads waiting for input
	hungUp   bool
	closed   bool
	state    http.ConnState
	deadline time.Time
	timer    *time.Timer
}

const fuzzConnMaxOut = 1 << 20

func newFuzzConn(input []byte) *fuzzConn {
	return &fuzzConn{input: input, changed: make(chan struct{}), state: http.StateNew}
}

// notify wakes every waiter; c.mu is held.
func (c *fuzzConn) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.closed:
			return 0, net.ErrClosed
		case !c.deadline.IsZero() && !time.Now().Before(c.deadline):
			return 0, os.ErrDeadlineExceeded
		case c.pos < len(c.input):
			n := copy(p, c.input[c.pos:])
			c.pos += n
			c.notify()
			return n, nil
		case c.hungUp:
			return 0, io.EOF
		}
		c.blocked++
		c.notify()
		ch := c.changed
		c.mu.Unlock()
		<-ch
		c.mu.Lock()
		c.blocked--
	}
}

func (c *fuzzConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if room := fuzzConnMaxOut - len(c.out); room > 0 {
		c.out = append(c.out, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (c *fuzzConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		c.notify()
	}
	return nil
}

// hangUp is the client closing its side: reads past the input get io.EOF.
func (c *fuzzConn) hangUp() {
	c.mu.Lock()
	c.hungUp = true
	c.notify()
	c.mu.Unlock()
}

// setState records the server's view of the connection (http.Server.ConnState).
func (c *fuzzConn) setState(s http.ConnState) {
	c.mu.Lock()
	c.state = s
	c.notify()
	c.mu.Unlock()
}

// waitFor waits until cond (called with c.mu held) holds or d passes; it
// reports whether cond held.
func (c *fuzzConn) waitFor(d time.Duration, cond func(c *fuzzConn) bool) bool {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		c.mu.Lock()
		ok, ch := cond(c), c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-timeout.C:
			return false
		}
	}
}

// stuck: the server waits for input it will never get, with nothing in
// flight (HTTP/1.1 between requests, HTTP/2 with no stream open), or it
// has let the connection go.
func (c *fuzzConn) stuck() bool {
	switch c.state {
	case http.StateClosed, http.StateHijacked:
		return true
	case http.StateNew, http.StateIdle:
		return c.closed || c.pos == len(c.input) && c.blocked > 0
	}
	return c.closed
}

// goneAway reports whether the server wrote an HTTP/2 GOAWAY frame (type 7)
// on this prior-knowledge connection: it then stops reading and closes the
// connection when x/net/http2's goAwayTimeout (1 s) has passed, which no
// client action can hasten. c.mu is held.
func (c *fuzzConn) goneAway() bool {
	if !bytes.HasPrefix(c.input, []byte(http2.ClientPreface)) {
		return false
	}
	for out := c.out; len(out) >= 9; {
		n := int(out[0])<<16 | int(out[1])<<8 | int(out[2])
		if out[3] == 0x7 {
			return true
		}
		if len(out) < 9+n {
			break
		}
		out = out[9+n:]
	}
	return false
}

// output returns what the server wrote.
func (c *fuzzConn) output() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]byte(nil), c.out...)
}

func (c *fuzzConn) SetDeadline(t time.Time) error { return c.SetReadDeadline(t) }

func (c *fuzzConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.deadline = t
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	if !t.IsZero() {
		c.timer = time.AfterFunc(time.Until(t), func() {
			c.mu.Lock()
			c.notify()
			c.mu.Unlock()
		})
	}
	c.notify()
	return nil
}

func (c *fuzzConn) SetWriteDeadline(time.Time) error { return nil }

func (c *fuzzConn) LocalAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8443} }

func (c *fuzzConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 5555} }

// connListener hands the connections sent on conns to a server.
type connListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newConnListener() *connListener {
	return &connListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8443} }

// serve hands c to the server; false once the listener is closed.
func (l *connListener) serve(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

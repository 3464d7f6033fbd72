package ingress

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
)

// connLimiter counts a listener's open connections, TCP and QUIC together,
// against Limits.MaxConnections (0: no limit). The limit can change on a
// running listener.
type connLimiter struct {
	max   atomic.Int64
	open  atomic.Int64
	freed chan struct{} // cap 1: a slot was released or the limit raised
}

func newConnLimiter(max int) *connLimiter {
	c := &connLimiter{freed: make(chan struct{}, 1)}
	c.max.Store(int64(max))
	return c
}

// setMax changes the limit; waiters see a raised one at once.
func (c *connLimiter) setMax(max int) {
	c.max.Store(int64(max))
	signal(c.freed)
}

// tryAcquire takes a slot unless the limit is reached.
func (c *connLimiter) tryAcquire() bool {
	for {
		n := c.open.Load()
		if m := c.max.Load(); m > 0 && n >= m {
			return false
		}
		if c.open.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func (c *connLimiter) release() {
	c.open.Add(-1)
	signal(c.freed)
}

// errTooManyConnections refuses a QUIC connection attempt beyond
// max_connections (quic-go answers CONNECTION_REFUSED).
var errTooManyConnections = errors.New("max_connections reached")

// limitListener is the TCP side of a connLimiter: an accepted connection
// waits for a free slot before Accept returns it (unserved, as if still in
// the kernel's queue; netutil.LimitListener waits before accepting, which
// would hold a slot for a connection that has not arrived), and holds its
// slot until closed. One goroutine (http.Server's accept loop) calls
// Accept.
type limitListener struct {
	net.Listener
	lim       *connLimiter
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, lim *connLimiter) *limitListener {
	return &limitListener{Listener: ln, lim: lim, done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	for !l.lim.tryAcquire() {
		select {
		case <-l.lim.freed:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
	return &limitedConn{Conn: c, lim: l.lim}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn gives its slot back when closed (once).
type limitedConn struct {
	net.Conn
	lim  *connLimiter
	once sync.Once
}

// NetConn is the connection under c (the TCP one), as tls.Conn's.
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.lim.release)
	return err
}

// signal wakes a waiter on ch (capacity 1) without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

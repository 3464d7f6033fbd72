package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
)

// h1Transport is the round-tripper of "http" (HTTP/1.1) backends.
//
// A request without a body (GET, HEAD, most of a gateway's traffic) is
// written and its response read on the caller's goroutine, over a pool of
// connections of its own: no reader and writer goroutine per connection
// and no hand-off between them, which was a fifth of the agent's CPU per
// small request behind net/http's Transport (issue 10 profiles). Parsing
// and writing stay net/http's (http.ReadResponse, Request.Write), so the
// wire format is the library's. A request with a body, an Upgrade or
// CONNECT goes to net/http's Transport, which writes a body while it reads
// an early response and hands an upgraded connection over.
type h1Transport struct {
	fallback      *http.Transport
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	headerTimeout time.Duration // 0: none
	idleTimeout   time.Duration // 0: none
	maxIdle       int

	mu   sync.Mutex
	idle []*h1Conn // most recently used last
}

// maxResponseHeaderBytes bounds a response's status line and header
// section (each 1xx's too), as net/http's Transport default does (bytes).
const maxResponseHeaderBytes = 10 << 20

var (
	// errH1HeaderTimeout is the response-header timeout of the direct path:
	// the same condition as net/http's, which Classify maps to 504.
	errH1HeaderTimeout = fmt.Errorf("net/http: %w", ErrResponseHeaderTimeout)
)

// direct reports whether req takes the direct path: no body, no trailer,
// no Upgrade, not CONNECT.
func direct(req *http.Request) bool {
	return (req.Body == nil || req.Body == http.NoBody) && req.Method != http.MethodConnect &&
		len(req.Trailer) == 0 && req.Header["Upgrade"] == nil && req.URL.Scheme == SchemeHTTP
}

// RoundTrip implements http.RoundTripper. Errors are net/http's where the
// condition is the same: "net/http: invalid header field ..." for a field
// it would not send (IsUnsendable), a dial *net.OpError, a response-header
// timeout Classify maps to 504, the context's cause once req's context is
// done.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !direct(req) {
		return t.fallback.RoundTrip(req)
	}
	if err := validHeader(req); err != nil {
		return nil, err
	}
	ctx := req.Context()
	for retried := false; ; retried = true {
		pc, err := t.get(ctx, req.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := pc.roundTrip(ctx, req)
		if err == nil {
			return resp, nil
		}
		var ce *connError
		if !retried && errors.As(err, &ce) && ce.reused && ce.unanswered && (ce.write || replayable(req)) && ctx.Err() == nil {
			// A kept-alive connection the backend had closed: the request
			// never reached it, or (nothing read) never got an answer; net/http
			// sends it again on a new connection in the same cases.
			continue
		}
		return nil, err
	}
}

// replayable reports whether a request without a body may be sent again
// after a reused connection failed without a response: its method is
// idempotent (RFC 9110 §9.2.2) or it carries an idempotency key, the rule of
// net/http's Transport.
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return req.Header["Idempotency-Key"] != nil || req.Header["X-Idempotency-Key"] != nil
}

// validHeader refuses what net/http's Transport refuses to send, with its
// error texts.
func validHeader(req *http.Request) error {
	if req.URL.Host == "" {
		return errors.New("http: no Host in request URL")
	}
	if !validMethod(req.Method) {
		return fmt.Errorf("net/http: invalid method %q", req.Method)
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("net/http: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("net/http: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// validMethod reports whether m is a token (RFC 9110 §9.1), or empty (GET).
func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		if !httpguts.IsTokenRune(rune(m[i])) {
			return false
		}
	}
	return true
}

// CloseIdleConnections closes the idle connections of both paths.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	for _, pc := range idle {
		pc.pooled = false
		if pc.idleTimer != nil {
			pc.idleTimer.Stop()
		}
	}
	t.mu.Unlock()
	for _, pc := range idle {
		pc.close()
	}
	t.fallback.CloseIdleConnections()
}

// get returns the most recently used live idle connection, or a new one.
func (t *h1Transport) get(ctx context.Context, addr string) (*h1Conn, error) {
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			break
		}
		pc := t.idle[n-1]
		t.idle[n-1] = nil
		t.idle = t.idle[:n-1]
		pc.pooled = false
		t.mu.Unlock()
		if pc.alive() {
			pc.reused = true
			return pc, nil
		}
		pc.close()
	}
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	pc := &h1Conn{t: t, c: c}
	pc.closeFn = pc.close
	pc.lr.r = c
	pc.lr.n = maxResponseHeaderBytes
	pc.br = bufio.NewReaderSize(&pc.lr, 4<<10)
	pc.bw = bufio.NewWriterSize(c, 4<<10)
	if sc, ok := c.(syscall.Conn); ok {
		pc.raw, _ = sc.SyscallConn()
		pc.peekFn = pc.peek
	}
	return pc, nil
}

// put keeps pc for the next request, or closes it when the pool is full.
func (t *h1Transport) put(pc *h1Conn) {
	t.mu.Lock()
	if len(t.idle) >= t.maxIdle {
		t.mu.Unlock()
		pc.close()
		return
	}
	pc.pooled = true
	pc.idleAt = time.Now()
	t.idle = append(t.idle, pc)
	if t.idleTimeout > 0 {
		if pc.idleTimer == nil {
			pc.idleTimer = time.AfterFunc(t.idleTimeout, pc.expire)
		} else {
			pc.idleTimer.Reset(t.idleTimeout)
		}
	}
	t.mu.Unlock()
}

// h1Conn is one connection of the direct path. Its owner is the request
// using it, or the pool while it is idle.
type h1Conn struct {
	t       *h1Transport
	c       net.Conn
	raw     syscall.RawConn    // nil: no liveness check
	peekFn  func(uintptr) bool // pc.peek and pc.close as values made once: one allocation less per request each
	closeFn func()
	idleOK  bool
	// staleDeadline: the read deadline of the last response's headers is
	// still set (its body needed no read); the next request replaces it.
	staleDeadline bool
	lr            limitedReader
	br            *bufio.Reader
	bw            *bufio.Writer
	reused        bool
	pooled        bool // guarded by t.mu
	idleAt        time.Time
	idleTimer     *time.Timer
}

// limitedReader counts what it reads and fails past its limit n: the
// response header bound (net/http's "server response headers exceeded").
type limitedReader struct {
	r    io.Reader
	n    int64
	read int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("net/http: server response headers exceeded 10485760 bytes; aborted")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	l.read += int64(n)
	return n, err
}

// connError is a failure of the direct path on one connection: reused says
// the connection had served an earlier request, write that the request
// could not be written, unanswered that no byte of a response came.
type connError struct {
	err                       error
	reused, write, unanswered bool
}

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// roundTrip sends req on pc and reads its response headers. The returned
// response's body gives pc back to the pool once read to its end.
func (pc *h1Conn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	// A done context (client gone, per-try timer, hedge won elsewhere)
	// closes the connection: that ends a blocked read or write at once.
	stop := context.AfterFunc(ctx, pc.closeFn)
	fail := func(err error, write bool) (*http.Response, error) {
		stop()
		pc.close()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("net/http: request canceled: %w", context.Cause(ctx))
		}
		if IsUnsendable(err) || err == errH1HeaderTimeout {
			// Refused before a byte went out (an invalid Host): sent again,
			// it fails again. A backend past the response-header timeout has
			// the request: net/http never sends it again either.
			return nil, err
		}
		return nil, &connError{err: err, reused: pc.reused, write: write, unanswered: pc.lr.read == 0}
	}
	pc.lr.read = 0 // what came back for this request: nothing yet
	if err := req.Write(pc.bw); err != nil {
		return fail(err, true)
	}
	if err := pc.bw.Flush(); err != nil {
		return fail(err, true)
	}
	if pc.t.headerTimeout > 0 {
		_ = pc.c.SetReadDeadline(time.Now().Add(pc.t.headerTimeout))
	}
	pc.lr.n = maxResponseHeaderBytes
	trace := httptrace.ContextClientTrace(ctx)
	if trace != nil && trace.GotFirstResponseByte != nil {
		if b, err := pc.br.Peek(1); err == nil && len(b) == 1 {
			trace.GotFirstResponseByte()
		}
	}
	var resp *http.Response
	for {
		var err error
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			var ne net.Error
			if pc.t.headerTimeout > 0 && errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
				err = errH1HeaderTimeout
			}
			return fail(err, false)
		}
		code := resp.StatusCode
		if code < 100 || code > 199 || code == http.StatusSwitchingProtocols {
			break // 101 is final (net/http, Go issue 26161)
		}
		// As net/http: a trace that takes 1xx responses limits their
		// number itself, and each gets a fresh header bound; without one,
		// the bound covers them all.
		if trace != nil && trace.Got1xxResponse != nil {
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return fail(err, false)
			}
			pc.lr.n = maxResponseHeaderBytes
		}
	}
	if pc.t.headerTimeout > 0 {
		// A body already in the buffer (most small responses) needs no
		// socket read: the deadline stays until the next request replaces
		// it, one deadline change per request instead of two.
		pc.staleDeadline = resp.Body == http.NoBody || resp.ContentLength >= 0 && int64(pc.br.Buffered()) >= resp.ContentLength
		if !pc.staleDeadline {
			_ = pc.c.SetReadDeadline(time.Time{})
		}
	}
	pc.lr.n = 1<<63 - 1
	keep := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
	if resp.Body == http.NoBody {
		if resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Body = &h1Body{ReadCloser: http.NoBody, pc: pc, stop: stop}
			return resp, nil
		}
		pc.release(stop, keep)
		return resp, nil
	}
	resp.Body = &h1Body{ReadCloser: resp.Body, pc: pc, stop: stop, keep: keep}
	return resp, nil
}

// release ends pc's request: back to the pool when keep, nothing is left
// unread and the context did not close it first; closed otherwise.
func (pc *h1Conn) release(stop func() bool, keep bool) {
	if !stop() {
		return // closed by the context
	}
	if !keep || pc.br.Buffered() > 0 {
		pc.close()
		return
	}
	pc.t.put(pc)
}

// alive reports whether an idle connection can carry a request: not idle
// past the timeout, not closed by the backend, no unsolicited bytes (a
// backend's 204 with a body, say). One non-blocking peek at the socket.
func (pc *h1Conn) alive() bool {
	if pc.t.idleTimeout > 0 {
		if pc.idleTimer != nil {
			pc.idleTimer.Stop()
		}
		if time.Since(pc.idleAt) >= pc.t.idleTimeout {
			return false
		}
	}
	if pc.raw == nil {
		return true
	}
	pc.idleOK = false
	err := pc.raw.Read(pc.peekFn)
	if err != nil && pc.staleDeadline && errors.Is(err, os.ErrDeadlineExceeded) {
		// The last response's header deadline passed while idle.
		pc.staleDeadline = false
		_ = pc.c.SetReadDeadline(time.Time{})
		err = pc.raw.Read(pc.peekFn)
	}
	return err == nil && pc.idleOK
}

// peek is the RawConn.Read callback of alive. It sets idleOK when the
// socket is open and has nothing to read.
func (pc *h1Conn) peek(fd uintptr) bool {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	pc.idleOK = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
	return true
}

// expire closes pc when it is still idle past the idle timeout.
func (pc *h1Conn) expire() {
	t := pc.t
	t.mu.Lock()
	if !pc.pooled || time.Since(pc.idleAt) < t.idleTimeout {
		t.mu.Unlock()
		return
	}
	for i, c := range t.idle {
		if c == pc {
			t.idle = append(t.idle[:i], t.idle[i+1:]...)
			break
		}
	}
	pc.pooled = false
	t.mu.Unlock()
	pc.close()
}

func (pc *h1Conn) close() { _ = pc.c.Close() }

// h1Body is a response body of the direct path: read to its end, it gives
// its connection back to the pool; closed before that, it closes it
// (net/http does the same). Close may run while a Read is blocked.
type h1Body struct {
	io.ReadCloser
	pc   *h1Conn
	stop func() bool
	keep bool
	done atomic.Bool
}

// Read implements io.Reader.
func (b *h1Body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.done.CompareAndSwap(false, true) {
		b.pc.release(b.stop, b.keep && err == io.EOF)
	}
	return n, err
}

// Close implements io.Closer.
func (b *h1Body) Close() error {
	if b.done.CompareAndSwap(false, true) {
		b.stop()
		b.pc.close()
	}
	return nil
}

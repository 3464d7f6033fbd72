package gateway

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// The timeout ladder of an upstream (interface.md `timeouts { connect,
// response_header, body_idle, request }`). connect and response_header
// belong to the transport (upstream.Config, roundTrip); body_idle and
// request to the pipeline, here:
//
//   - body_idle bounds each wait for the backend's next response body bytes
//     (bodyIdle). Past it the client's stream is reset (HTTP/2, HTTP/3) or
//     its connection closed (HTTP/1.1), never a clean end of a truncated
//     body, and the backend is blamed (passive health).
//   - request bounds the whole exchange, every attempt included
//     (requestDeadline): 504 request_timeout before the response started, a
//     reset after.
//
// Neither applies to tunnels (WebSocket, tunnel.go): they live as long as
// both sides keep them open.

// DefaultBodyIdleTimeout is UpstreamConfig.BodyIdleTimeout when zero.
const DefaultBodyIdleTimeout = 60 * time.Second

var (
	// errBodyIdleTimeout: a read of a backend's response body waited longer
	// than body_idle.
	errBodyIdleTimeout = errors.New("response body: the backend sent nothing for body_idle")
	// errRequestTimeout is the cause of the exchange's context once the
	// upstream's request timeout passed.
	errRequestTimeout = errors.New("the upstream's request timeout passed")
)

// bodyIdleTimeout is u's body_idle: its own, else DefaultBodyIdleTimeout.
func (u *UpstreamConfig) bodyIdleTimeout() time.Duration {
	if u.BodyIdleTimeout > 0 {
		return u.BodyIdleTimeout
	}
	return DefaultBodyIdleTimeout
}

// requestDeadline bounds ctx by timeout (the upstream's request timeout),
// counted from now: the caller sets it once, before the first attempt, so
// that every attempt, backoff and hedge of the exchange and the copy of the
// response body share it. Its context's cause is errRequestTimeout once it
// passed (requestTimedOut). A timeout <= 0 is none: ctx itself, and no
// allocation. stop releases the timer; call it when the exchange is over.
func requestDeadline(ctx context.Context, timeout time.Duration) (_ context.Context, stop context.CancelFunc) {
	if timeout <= 0 {
		return ctx, noStop
	}
	return context.WithTimeoutCause(ctx, timeout, errRequestTimeout)
}

func noStop() {}

// requestTimedOut reports whether ctx (requestDeadline's, or a context
// derived from it) ended because the request timeout passed.
func requestTimedOut(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), errRequestTimeout)
}

// idleVerdict is bodyIdle's decision, pure: a read in progress (reading)
// that has waited for waited trips when that reaches timeout; otherwise the
// next look is when it would (with no read in progress, a full timeout
// from now: a read that starts later cannot reach it sooner).
func idleVerdict(reading bool, waited, timeout time.Duration) (trip bool, next time.Duration) {
	switch {
	case !reading:
		return false, timeout
	case waited >= timeout:
		return true, 0
	}
	return false, timeout - waited
}

// bodyIdle ends a read of a backend's response body that waits longer than
// its timeout (body_idle): it closes the transport's body, which makes the
// blocked read return (x/net/http2 resets the stream, net/http closes the
// connection), and the read fails with errBodyIdleTimeout. Only time spent
// inside Read counts: a copy loop that waits on a slow client is not the
// backend's silence, and bytes that keep coming, however slowly, never trip
// it.
//
// Cost per response: no allocation (values and their timers are pooled),
// a clock read and an uncontended lock; per read, a clock read and two
// atomic stores. The timer is not moved per read, nor stopped at the end:
// when it fires it looks at the read in progress and either trips it or
// re-arms for when that read would reach the timeout (idleVerdict); a
// released watch's timer runs out doing nothing, and a pooled watch taken
// again keeps a timer that is due before its new timeout would be.
type bodyIdle struct {
	body    io.ReadCloser // the transport's body; nil once released
	timeout time.Duration
	epoch   time.Time    // set once: times below are monotonic durations since
	since   atomic.Int64 // when the read in progress started (ns after epoch, +1); 0: no read
	tripped atomic.Bool

	mu     sync.Mutex // guards the fields below and body; held while the body is closed
	timer  *time.Timer
	due    time.Duration // when timer fires, if armed
	armed  bool
	active bool
	pooled bool // release puts b back into bodyIdlePool
}

// newBodyIdle is an idle watch with its timer, not started.
func newBodyIdle() *bodyIdle {
	b := &bodyIdle{epoch: time.Now()}
	b.timer = time.AfterFunc(math.MaxInt64, b.check)
	b.timer.Stop()
	return b
}

var bodyIdlePool = sync.Pool{New: func() any {
	b := newBodyIdle()
	b.pooled = true
	return b
}}

// watchBodyIdle puts resp's body under a body_idle watch of timeout (> 0):
// resp.Body becomes the watch. release must be called once the body is done
// with (it restores resp.Body); a nil watch (a response without a body) is
// a no-op.
func watchBodyIdle(resp *http.Response, timeout time.Duration) *bodyIdle {
	if resp.Body == nil || resp.Body == http.NoBody || timeout <= 0 {
		return nil
	}
	return bodyIdlePool.Get().(*bodyIdle).start(resp, timeout)
}

// start arms b for resp (see watchBodyIdle).
func (b *bodyIdle) start(resp *http.Response, timeout time.Duration) *bodyIdle {
	b.mu.Lock()
	b.body, b.timeout, b.active = resp.Body, timeout, true
	b.since.Store(0)
	b.tripped.Store(false)
	if deadline := time.Since(b.epoch) + timeout; !b.armed || b.due > deadline {
		// Else the timer of an earlier use is due sooner: it looks at
		// this use then, and re-arms for it.
		b.timer.Reset(timeout)
		b.due, b.armed = deadline, true
	}
	b.mu.Unlock()
	resp.Body = b
	return b
}

func (b *bodyIdle) Read(p []byte) (int, error) {
	b.since.Store(int64(time.Since(b.epoch)) + 1)
	n, err := b.body.Read(p)
	b.since.Store(0)
	if err != nil && err != io.EOF && b.tripped.Load() {
		return n, errBodyIdleTimeout
	}
	return n, err
}

// Close closes the transport's body.
func (b *bodyIdle) Close() error { return b.body.Close() }

// timedOut reports whether the watch cut the body (nil: false).
func (b *bodyIdle) timedOut() bool { return b != nil && b.tripped.Load() }

// check runs when the timer fires (possibly late, for an earlier use of a
// pooled value: its verdict is then about the current one, which is as
// good as any other look).
func (b *bodyIdle) check() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = false
	if !b.active {
		return
	}
	since := b.since.Load()
	now := time.Since(b.epoch)
	trip, next := idleVerdict(since != 0, now-time.Duration(since-1), b.timeout)
	if !trip {
		b.timer.Reset(next)
		b.due, b.armed = now+next, true
		return
	}
	b.tripped.Store(true)
	_ = b.body.Close() // under mu: after release the body is no longer this watch's
}

// release ends the watch and gives resp its transport body back (dropping
// any wrapper put around the watch since); no close happens after it
// returns, and b must not be used again. It is called by the goroutine
// that reads the body, once it no longer does. A nil b does nothing.
func (b *bodyIdle) release(resp *http.Response) {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.active = false   // the timer is left to run out: its check does nothing now
	resp.Body = b.body // whatever wraps b (grpc.go's framing) is done with too
	b.body = nil
	b.mu.Unlock()
	if b.pooled {
		bodyIdlePool.Put(b)
	}
}

package reqbody

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// bodyProbeWait bounds how long a request of unknown length waits for its
// body's first byte or its end before it is forwarded as a stream; net/http's
// Transport waits as long for methods that usually have no body
// (transfer.go, probeRequestBody).
const bodyProbeWait = 200 * time.Millisecond

// probeWait is bodyProbeWait, in nanoseconds; tests change it.
var probeWait = func() *atomic.Int64 { var v atomic.Int64; v.Store(int64(bodyProbeWait)); return &v }()

// readDeadliner is quic-go's HTTP/3 ResponseWriter: a read deadline on the
// request stream (what http.ResponseController.SetReadDeadline calls). Go's
// HTTP/1.1 and HTTP/2 ResponseWriters have the method too, with other
// effects (see Settle).
type readDeadliner interface{ SetReadDeadline(time.Time) error }

// pastDeadline is a read deadline that has always passed.
var pastDeadline = time.Unix(1, 0)

// Settle decides, before r is forwarded, whether a request without a
// Content-Length has a body at all, so that a request without content goes
// out without body framing (RFC 9110 §8.6, RFC 9112 §6, RFC 9113 §8.1): no
// chunked encoding or Content-Length on HTTP/1.1, HEADERS with END_STREAM
// and no DATA frame on HTTP/2. A request known to be empty gets
// r.Body = http.NoBody and r.ContentLength = 0; r is changed in place.
//
// HTTP/3 gives no length when the client sent no content-length, and the
// request stream's end (FIN) normally arrives with the HEADERS frame. So:
//  1. A read with a deadline that has passed returns io.EOF, without
//     waiting, when the stream already ended; otherwise it times out having
//     consumed nothing (quic-go checks the deadline before copying data).
//     No goroutine, no timer: this is the path of every bodyless GET.
//  2. Only if that is inconclusive (the FIN came in a later packet, or there
//     is a body), the first byte or the end is awaited for up to
//     bodyProbeWait in a goroutine, as net/http does for GET. An upload's
//     first bytes are there at once; a client that waits before sending
//     (a full-duplex stream) is held back by that bound at most. Requests
//     with an Expect field (the client waits for the 100) and gRPC streams
//     (a client may send nothing until the server has) are not probed.
func Settle(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength >= 0 || r.Body == nil || r.Body == http.NoBody {
		return
	}
	// Only quic-go's stream takes a read deadline in stride: on net/http's
	// HTTP/1.1 connection a timed-out read cancels the request, and
	// x/net/http2 resets the stream when its deadline passes.
	if d, ok := w.(readDeadliner); ok && r.ProtoMajor == 3 {
		body, empty := endedAlready(d, r.Body)
		r.Body = body
		if empty {
			r.Body, r.ContentLength = http.NoBody, 0
			return
		}
	}
	if len(r.Header["Expect"]) > 0 || wire.IsGRPC(r.Header) {
		return
	}
	if body, empty := probeBody(r.Body, time.Duration(probeWait.Load())); empty {
		r.Body, r.ContentLength = http.NoBody, 0
	} else {
		r.Body = body
	}
}

// endedAlready reads body once with a deadline that has passed: empty is
// true when the stream had already ended. The returned body replaces body
// (it replays a byte should the read return one after all).
func endedAlready(d readDeadliner, body io.ReadCloser) (_ io.ReadCloser, empty bool) {
	if d.SetReadDeadline(pastDeadline) != nil {
		return body, false
	}
	var one [1]byte
	n, err := body.Read(one[:])
	_ = d.SetReadDeadline(time.Time{})
	switch {
	case n > 0:
		return &probedBody{ReadCloser: body, one: one, n: n, err: keepErr(err), done: closedChan}, false
	case err == io.EOF:
		return body, true
	}
	return body, false // timed out (or failed: the next read reports it)
}

// keepErr is err as a later Read must return it: nil for a timeout.
func keepErr(err error) error {
	if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
		return nil
	}
	return err
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// bodyProbes counts probeBody calls (Probes).
var bodyProbes atomic.Int64

// Probes counts the requests whose body's first byte or end had to be
// awaited (Settle's bounded probe): for tests, the path of every request
// whose stream end was not known at once.
func Probes() int64 { return bodyProbes.Load() }

// SetProbeWait changes how long Settle's probe waits (default 200 ms), for
// tests; restore puts the default back.
func SetProbeWait(d time.Duration) (restore func()) {
	probeWait.Store(int64(d))
	return func() { probeWait.Store(int64(bodyProbeWait)) }
}

// probeBody reads body's first byte in a goroutine and waits up to wait for
// it: empty is true when the body ended first. Otherwise the returned body
// yields that byte (or waits for it) before the rest.
func probeBody(body io.ReadCloser, wait time.Duration) (_ io.ReadCloser, empty bool) {
	bodyProbes.Add(1)
	p := &probedBody{ReadCloser: body, done: make(chan struct{})}
	go func() {
		p.n, p.err = io.ReadFull(body, p.one[:]) // loops over empty DATA frames and trailers
		if p.err == io.ErrUnexpectedEOF {
			p.err = io.EOF
		}
		close(p.done)
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-p.done:
		if p.n == 0 && p.err == io.EOF {
			return nil, true
		}
	case <-t.C:
	}
	return p, false
}

// probedBody is a body whose first byte was read ahead: it returns that byte
// (once the read in flight is done), then the read's error, then the rest.
type probedBody struct {
	io.ReadCloser
	done  chan struct{} // closed when one, n and err are set
	one   [1]byte
	n     int
	err   error
	taken bool
}

func (p *probedBody) Read(b []byte) (int, error) {
	if !p.taken && len(b) > 0 {
		<-p.done
		p.taken = true
		if p.n > 0 {
			b[0] = p.one[0]
			return 1, p.err
		}
		if p.err != nil {
			return 0, p.err
		}
	}
	return p.ReadCloser.Read(b)
}

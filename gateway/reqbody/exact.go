package reqbody

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// errBodyMalformed: the request's DATA frames run past its Content-Length, or
// its trailers are malformed. Either makes the request malformed
// (RFC 9114 §4.1.2).
var errBodyMalformed = errors.New("request body malformed: more data than Content-Length, or malformed trailers (RFC 9114 §4.1.2)")

// exactBody hands on the last bytes of a body of known length only once the
// client's stream has ended right there. A request whose DATA frames exceed
// its Content-Length is malformed (RFC 9114 §4.1.2), but a backend given
// Content-Length bytes would run it before the excess showed; and a client
// ends its request stream after the body (RFC 9114 §4.1), trailers included,
// so waiting for that end costs a compliant client nothing.
type exactBody struct {
	io.ReadCloser
	remaining int64 // declared bytes not read yet
	done      bool  // the end of the stream was confirmed
}

func (b *exactBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.ReadCloser.Read(p)
	b.remaining -= int64(n)
	if b.remaining > 0 {
		return n, err
	}
	if err == nil {
		err = b.confirmEnd()
	}
	if err != nil && err != io.EOF {
		// quic-go reports data past the length with the last bytes;
		// either way they never reach the backend.
		return 0, err
	}
	b.done = true
	return n, io.EOF
}

// confirmEnd reads on after the declared length until the stream ends: at
// EOF nil; more data or malformed trailers give errBodyMalformed; a reset or
// a closed connection is returned as is.
func (b *exactBody) confirmEnd() error {
	var one [1]byte
	for {
		n, err := b.ReadCloser.Read(one[:]) // quic-go parses trailers here
		switch {
		case n > 0:
			return errBodyMalformed
		case err == io.EOF:
			return nil
		case err != nil && Kind(err) == Canceled:
			return err
		case err != nil:
			return errors.Join(errBodyMalformed, err)
		}
		// (0, nil): an empty DATA frame or the trailers; read on.
	}
}

// Failure is how reading the client's request body failed.
type Failure = int32

// The failures, as Client.Failed and Kind report them.
const (
	OK         Failure = iota
	Incomplete         // the stream ended before Content-Length: malformed (RFC 9114 §4.1.2)
	Malformed          // more data than Content-Length, or bad trailers: malformed (RFC 9114 §4.1.2)
	Canceled           // the client reset the stream or went away
	TooLarge           // longer than max_request_body_bytes (Limit)
	Timeout            // the client stalled for client_body_timeout (stall.go)
)

// Kind classifies an error reading the client's body. Resets,
// closed connections and cancellation are the client going away; other
// errors from quic-go's HTTP/3 layer are protocol violations of the request.
func Kind(err error) Failure {
	var h3 *http3.Error
	var se *quic.StreamError
	var ae *quic.ApplicationError
	var ie *quic.IdleTimeoutError
	var te *quic.TransportError
	var sr *quic.StatelessResetError
	switch {
	case errors.Is(err, errClientBodyTimeout):
		return Timeout
	case isBodyTooLarge(err):
		return TooLarge
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Incomplete
	case errors.Is(err, errBodyMalformed):
		return Malformed
	case errors.As(err, &h3), errors.As(err, &se), errors.As(err, &ae), errors.As(err, &ie),
		errors.As(err, &te), errors.As(err, &sr), errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, net.ErrClosed):
		return Canceled
	default:
		return Malformed
	}
}

// watchedBody records how reading the client's request body failed, so that
// the transport's resulting error is not blamed on the backend (a 502 and a
// passive-health failure for what a client did).
type watchedBody struct {
	io.ReadCloser
	failure atomic.Int32
	closed  atomic.Bool // the transport closed the body: later errors are its own
	sent    atomic.Bool // the transport read the body to its end
	// client is the client request's context (nil: unknown). Go's HTTP/2
	// server cancels it before it fails the body of a stream the client
	// reset, with an error of no exported type: a failure then is the
	// client going away, not a malformed body.
	client context.Context
}

func (w *watchedBody) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		w.sent.Store(true)
	case err != nil && !w.closed.Load():
		kind := Kind(err)
		if kind == Malformed && w.client != nil && w.client.Err() != nil {
			kind = Canceled
		}
		w.failure.CompareAndSwap(OK, kind)
	}
	return n, err
}

// Close is the transport giving the body up (done, or its backend
// connection broke): a read failing after it is not the client's doing.
func (w *watchedBody) Close() error {
	w.closed.Store(true)
	return w.ReadCloser.Close()
}

// sentWhole reports whether the transport read the whole body (a nil w,
// no body, is sent whole): until then a timeout may be the client's slow
// upload rather than the backend's delay.
func (w *watchedBody) sentWhole() bool { return w == nil || w.sent.Load() }

// failed is one of the body kinds above; a nil w (no body) is OK.
func (w *watchedBody) failed() Failure {
	if w == nil {
		return OK
	}
	return w.failure.Load()
}

// ConfirmEnd reads body, which must be empty (content-length: 0), to its
// end: nil at EOF; more data or malformed trailers give a Malformed
// error, a reset or a closed connection is returned as is (Kind).
func ConfirmEnd(body io.ReadCloser) error { return (&exactBody{ReadCloser: body}).confirmEnd() }

// Package reqbody reads a client's request body for the tries of one
// request: it holds the body to its Content-Length and to the end of the
// client's stream (RFC 9114 §4.1.2), tells a request without content from
// one with (Settle), bounds the client's stalls (client_body_timeout) and
// the body's size, coalesces large uploads, records how the client failed
// so the backend is never blamed for it, and keeps what a retry, or a
// transport's resend on a new connection, must send again.
package reqbody

import (
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// Client is the client's request body as the tries of one request send
// it: checked against its length (exactBody), coalesced, watched for the
// client's failures and, when a try may follow, shared through a
// replayBody that keeps what it can for a replay.
type Client struct {
	watched *watchedBody  // nil: the request has no body
	replay  *replayBody   // nil: the body is sent once, by the first try
	next    io.ReadCloser // the next try's reader; nil once taken
}

// HasBody reports whether r comes with a body (after Settle).
func HasBody(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

// NewClient wraps r's body for its tries (the zero Client when it has
// none). keep is the bytes kept for a replay; negative: no replay at
// all (no try can follow).
func NewClient(r *http.Request, keep int64) Client {
	if !HasBody(r) {
		return Client{}
	}
	var body io.ReadCloser = r.Body
	if r.ContentLength > 0 {
		body = &exactBody{ReadCloser: body, remaining: r.ContentLength}
	}
	if r.ContentLength > coalesceBytes {
		body = newCoalescingBody(body)
	}
	cb := Client{watched: &watchedBody{ReadCloser: body, client: r.Context()}}
	cb.next = cb.watched
	if keep >= 0 {
		if r.ContentLength > keep {
			keep = 0 // sent once; but still taken over while unread
		}
		rb := &replayBody{src: cb.watched, limit: keep}
		if r.ContentLength > 0 && r.ContentLength <= keep {
			rb.log = make([]byte, 0, r.ContentLength)
		}
		cb.replay, cb.next = rb, &replayReader{b: rb}
	}
	return cb
}

// TryBody is the next try's body for wire.Outgoing (nil cb: none).
func (cb *Client) TryBody() wire.Body {
	if cb == nil || cb.watched == nil {
		return wire.Body{}
	}
	b := wire.Body{Reader: cb.take()}
	if cb.replay != nil {
		b.Again = cb.replay.next
	}
	return b
}

// take hands the next try its reader.
func (cb *Client) take() io.ReadCloser {
	rc := cb.next
	cb.next = nil
	return rc
}

// Kept reports whether another try can send the body (or there is none).
func (cb *Client) Kept() bool {
	return cb.watched == nil || cb.replay != nil && cb.replay.replayable()
}

// Again prepares the reader of one more try; false when the body can no
// longer be sent again.
func (cb *Client) Again() bool {
	if cb.watched == nil {
		return true
	}
	if cb.replay == nil {
		return false
	}
	rc, err := cb.replay.next()
	if err != nil {
		return false
	}
	cb.next = rc
	return true
}

// End seals the replay: no try follows, nothing more is kept.
func (cb *Client) End() {
	if cb.replay != nil {
		cb.replay.seal()
	}
}

// Failed is how reading the client's body failed (OK: it did not, or
// there is none); a nil cb has none.
func (cb *Client) Failed() Failure {
	if cb == nil {
		return OK
	}
	return cb.watched.failed()
}

// SentWhole reports whether the transport read the whole body (a nil cb,
// or no body, is sent whole): until then a timeout may be the client's
// slowness, not the backend's.
func (cb *Client) SentWhole() bool { return cb == nil || cb.watched.sentWhole() }

// Limit wraps r.Body, once Settle has run, with the body cap (for
// a body of unknown length; exactBody holds one of known length to its
// Content-Length) and the client_body_timeout watch. The returned watch
// must be stopped when the request is done (nil: nothing to stop).
func Limit(w http.ResponseWriter, r *http.Request, limit int64, timeout time.Duration) *Stall {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	s := WatchStall(w, r.Body, timeout)
	r.Body = s
	if limit > 0 && r.ContentLength < 0 {
		r.Body = http.MaxBytesReader(nil, r.Body, limit) // nil: no writes from the transport's goroutine
	}
	return s
}

// isBodyTooLarge: err is Limit's cap being hit.
func isBodyTooLarge(err error) bool {
	var mb *http.MaxBytesError
	return errors.As(err, &mb)
}

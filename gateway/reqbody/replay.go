package reqbody

import (
	"errors"
	"io"
	"sync"
)

// A request body is kept, up to the upstream's retry.max_body_bytes, so
// that it can be sent again: by the attempt loop to another backend
// (the pipeline's attempts), or by an HTTP/2 backend's transport on a new connection.
// An HTTP/2 backend's graceful GOAWAY names the last stream it will
// process; the streams above it were never processed and x/net/http2 sends
// them again, as it does after REFUSED_STREAM (RFC 9113 §6.8, §8.7), but
// only requests whose body it can get again (http.Request.GetBody). Both
// read the same replayBody: one buffer, one limit.

var (
	errBodyReplaced = errors.New("request body: taken over by a retry of the request")
	// ErrNotReplayable: the body is too long, or its request already answered,
	// to be sent again.
	ErrNotReplayable = errors.New("request body: too long, or already answered, to be sent again")
)

// replayBody shares one request body among the attempts of a round trip.
// It keeps the bytes read so far while they fit in the limit, so that a new
// attempt (GetBody) can read them again and then go on with the rest; the
// body streams through as before, nothing waits for it to be buffered. A
// longer body is sent once: past the limit nothing is kept, and a body
// nobody read yet can always be taken over.
//
// Only the newest attempt reads the client's body; an older one still in a
// Read when it was replaced hands what it got to the newest (it is kept
// even past the limit: the newest needs it) and fails.
type replayBody struct {
	src   io.ReadCloser
	limit int64

	srcMu sync.Mutex // held while reading src: one read at a time, in order

	mu       sync.Mutex // guards the fields below
	log      []byte     // body bytes from offset logStart, kept for the newest attempt or a replay
	logStart int64
	total    int64 // bytes read from src
	err      error // src's error once it returned one (io.EOF at the end)
	gen      int   // the newest attempt's generation
	sealed   bool  // no more attempts: past the limit, or the round trip is over
	// newestClosed: the transport gave the newest attempt's body up; src is
	// closed once no attempt can follow.
	newestClosed, srcClosed bool
}

// newReplayBody returns the first attempt's body and the GetBody for the
// next ones. limit is the bytes kept for a replay (0: only a body nobody
// has read yet can be taken over); sizeHint, if positive, is the expected
// length (preallocated when it fits the limit).
func newReplayBody(src io.ReadCloser, limit, sizeHint int64) (io.ReadCloser, func() (io.ReadCloser, error)) {
	b := &replayBody{src: src, limit: limit}
	if sizeHint > 0 && sizeHint <= limit {
		b.log = make([]byte, 0, sizeHint)
	}
	return &replayReader{b: b}, b.next
}

// replayable reports whether a new attempt can start (next would succeed
// now): the round trip is not over and every byte read so far is kept.
func (b *replayBody) replayable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.sealed && b.logStart == 0 && int64(len(b.log)) == b.total
}

// next starts a new attempt from the body's first byte (http.Request.GetBody).
// Errors: ErrNotReplayable once bytes were given up, or the round trip ended.
func (b *replayBody) next() (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.sealed || b.logStart > 0 || int64(len(b.log)) < b.total {
		return nil, ErrNotReplayable
	}
	b.gen++
	b.newestClosed = false
	return &replayReader{b: b, gen: b.gen}, nil
}

// seal ends replays: the round trip returned (a response, or an error the
// transport does not retry). What is kept is dropped once the newest attempt
// has read it; a body the transport already gave up is closed.
func (b *replayBody) seal() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sealed = true
	b.dropLocked(b.logStart + int64(len(b.log)))
	b.closeLocked()
}

// dropLocked frees the kept bytes when nothing can need them any more: no
// replay, and the newest attempt has read up to off.
func (b *replayBody) dropLocked(off int64) {
	if b.sealed && off >= b.logStart+int64(len(b.log)) {
		b.logStart, b.log = off, nil
	}
}

// closeLocked closes src once the newest attempt gave it up and no other can
// follow (a retry would need the rest of the client's body).
func (b *replayBody) closeLocked() {
	if b.newestClosed && b.sealed && !b.srcClosed {
		b.srcClosed = true
		b.src.Close() // does not call back into b
	}
}

type replayReader struct {
	b   *replayBody
	gen int
	off int64 // body bytes this attempt has read
}

// fromLog serves r from the kept bytes or the final error; ok is false when
// r must read src.
func (r *replayReader) fromLog(p []byte) (n int, err error, ok bool) {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.gen != b.gen {
		return 0, errBodyReplaced, true
	}
	if end := b.logStart + int64(len(b.log)); r.off < end {
		n = copy(p, b.log[r.off-b.logStart:])
		r.off += int64(n)
		b.dropLocked(r.off)
		return n, nil, true
	}
	if b.err != nil {
		return 0, b.err, true
	}
	return 0, nil, false
}

func (r *replayReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if n, err, ok := r.fromLog(p); ok {
		return n, err
	}
	b := r.b
	b.srcMu.Lock()
	defer b.srcMu.Unlock()
	// A replaced attempt's read may have finished meanwhile.
	if n, err, ok := r.fromLog(p); ok {
		return n, err
	}
	n, err := b.src.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(n)
	if err != nil {
		b.err = err
	}
	stale := r.gen != b.gen
	if stale || !b.sealed && b.total <= b.limit {
		b.log = append(b.log, p[:n]...)
	}
	if b.total > b.limit {
		b.sealed = true
	}
	if stale {
		return 0, errBodyReplaced
	}
	r.off += int64(n)
	b.dropLocked(r.off)
	if b.logStart+int64(len(b.log)) < r.off { // bytes given up: none kept
		b.logStart, b.log = r.off, nil
	}
	b.closeLocked()
	return n, err
}

// Close is the transport giving this attempt's body up. The client's body
// stays open while another attempt may follow (the handler's end closes
// it); a replaced attempt's Close does nothing.
func (r *replayReader) Close() error {
	b := r.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.gen == b.gen {
		b.newestClosed = true
		b.closeLocked()
	}
	return nil
}

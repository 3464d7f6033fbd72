package wire

import (
	"io"
	"net/http"
	"strings"
	"sync"
)

// streamsBody reports whether the response headers are sent at once rather
// than with the first body bytes: when the body's length is unknown (chunked
// or close-delimited HTTP/1.1, HTTP/2 without content-length). Those are the
// streams (text/event-stream, long polls, gRPC) whose first bytes may be
// long in coming, and a client must see the status without waiting for
// them. A body of known length normally follows its headers at once, so
// they share the first packet (one packet less for every small response).
func streamsBody(resp *http.Response) bool {
	return resp.ContentLength < 0 && resp.Body != nil && resp.Body != http.NoBody
}

// Response bodies are copied through a 32 KiB buffer, and through a
// bulkBufSize one once a read fills the small buffer with more to come: for
// HTTP/2 backends every read sends WINDOW_UPDATE frames and a TLS write, for
// HTTP/1.1 ones every read is a syscall, so bulk transfers read in large
// pieces (bytes).
const (
	copyBufSize = 32 << 10
	bulkBufSize = 256 << 10
)

var (
	copyBufPool = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}
	bulkBufPool = sync.Pool{New: func() any { b := make([]byte, bulkBufSize); return &b }}
)

// Buffer is a pooled copy buffer of 32 KiB, for relaying bytes (a
// tunnel's); PutBuffer gives it back.
func Buffer() *[]byte { return copyBufPool.Get().(*[]byte) }

// PutBuffer gives a Buffer back to the pool.
func PutBuffer(b *[]byte) { copyBufPool.Put(b) }

// CopyResponse writes the backend response to w, streaming the body and
// flushing each chunk so slow or long-lived responses reach the client as
// they arrive; a response without content (hasNoContent) gets its header
// only. It returns the body bytes written to w, and a backend read error
// or a client write error.
func CopyResponse(w http.ResponseWriter, resp *http.Response, clientMajor int) (written int64, backendErr, clientErr error) {
	h := w.Header()
	RemoveHopHeaders(resp.Header)
	// Alt-Svc describes the connection the client used, which is the
	// gateway's: TCP responses carry the listener's own (RFC 7838 §3).
	delete(resp.Header, "Alt-Svc")
	for k, v := range resp.Header {
		h[k] = v
	}
	if _, ok := resp.Header["Content-Type"]; !ok {
		// A present-but-nil value stops the HTTP/3 writer from sniffing one:
		// a proxy must not invent a media type the backend did not send.
		h["Content-Type"] = nil
	}
	noContent := resp.Request != nil && HasNoContent(resp.Request.Method, resp.StatusCode)
	if noContent {
		FixNoContentFraming(h, resp.StatusCode)
	}
	if len(resp.Trailer) > 0 && !noContent {
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
		}
		h["Trailer"] = []string{strings.Join(names, ", ")}
		if clientMajor == 1 {
			// Only a chunked HTTP/1.1 body has a trailer section
			// (RFC 9112 §7.1.2): Go's server sends one without a length.
			delete(h, "Content-Length")
		}
	}
	w.WriteHeader(resp.StatusCode)
	if noContent {
		// Whatever a misbehaving backend sent as content is dropped
		// (RFC 9112 §6.3): the HEADERS frame ends the stream.
		return 0, nil, nil
	}
	flusher, _ := w.(http.Flusher)
	if flusher != nil && streamsBody(resp) {
		flusher.Flush()
	}
	bufp, pool := copyBufPool.Get().(*[]byte), &copyBufPool
	defer func() { pool.Put(bufp) }()
	buf := *bufp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return written, nil, werr
			}
			written += int64(n)
			more := resp.ContentLength < 0 || written < resp.ContentLength
			// Flush when the backend paused (a short read: nothing more was
			// ready), so streams and slow bodies reach the client as they
			// arrive; while full buffers keep coming, QUIC's own buffering
			// batches them. The last chunk of a body of known length goes out
			// with the end of the stream instead (one packet less).
			if flusher != nil && rerr == nil && n < len(buf) && more {
				flusher.Flush()
			}
			if n == copyBufSize && pool == &copyBufPool && more && (resp.ContentLength < 0 || resp.ContentLength-written > copyBufSize) {
				pool.Put(bufp)
				bufp, pool = bulkBufPool.Get().(*[]byte), &bulkBufPool
				buf = *bufp
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return written, rerr, nil
		}
	}
	for k, v := range resp.Trailer {
		h[http.TrailerPrefix+k] = v
	}
	return written, nil, nil
}

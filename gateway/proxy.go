package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// hopHeaders are connection-specific fields that a proxy must not forward
// (RFC 9110 §7.6.1); HTTP/3 forbids them outright (RFC 9114 §4.2).
// HTTP2-Settings goes with an h2c upgrade (RFC 7540 §3.2.1), whether or not
// Connection names it (FuzzIngress found it forwarded alone).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Http2-Settings",
}

// removeHopHeaders deletes hop-by-hop fields, including those listed in
// Connection, from h in place. Early-Data stays even when listed: it is
// never connection-specific and an intermediary must not remove it
// (RFC 8470 §5.1), so the gateway's own mark cannot be struck that way.
// Nor can x-request-id, the gateway's own on every try (requestid.go): a
// client's "Connection: x-request-id" kept it from the backend
// (FuzzOutgoingHeaders).
func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = textproto.TrimString(f); f != "" && !strings.EqualFold(f, "Early-Data") && !strings.EqualFold(f, requestIDField) {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// outgoing builds the backend request of one try: same method, path,
// query and authority; hop-by-hop fields removed; X-Forwarded-* set; the
// client's body (cb, nil without one) streamed through the try's reader,
// wrapped (the returned *trailerBody, nil when not needed) when trailers are
// forwarded or hook asks for the end-of-body signal (a timer of the try's
// own). Header values are shared with r, not copied (neither side modifies
// them): this is the hot path. tt is the try's trace (nil: not traced).
func outgoing(ctx context.Context, r *http.Request, b *upstream.Backend, cb *clientBody, hook bool, tt *observe.TryTrace) (*http.Request, *trailerBody) {
	h := make(http.Header, len(r.Header)+3)
	for k, v := range r.Header {
		h[k] = v
	}
	removeHopHeaders(h)
	keepTETrailers(h, r.Header, b.Scheme)
	if _, ok := h["User-Agent"]; !ok {
		// An empty value stops net/http and x/net/http2 from sending their
		// own ("Go-http-client/1.1"): a proxy forwards the client's, or none.
		h["User-Agent"] = emptyValue
	}
	u := &url.URL{Scheme: transport.URLScheme(b.Scheme), Host: b.HostPort(), Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery, ForceQuery: r.URL.ForceQuery}
	out := (&http.Request{
		Method: r.Method, URL: u, Header: h, Host: r.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		ContentLength: r.ContentLength, RemoteAddr: r.RemoteAddr,
	}).WithContext(ctx)
	if cb != nil && cb.watched != nil {
		out.Body = cb.take()
	} else {
		out.ContentLength = 0
	}
	if out.Body != nil && r.ContentLength < 0 && b.Scheme == transport.SchemeHTTP {
		// The body exists (settleBody): chunked, without net/http probing
		// it a second time for methods that usually have none.
		out.TransferEncoding = chunkedTE
	}
	// Request trailers are forwarded once the body ends. quic-go moves the
	// names the client declared (its Trailer field) into r.Trailer and
	// replaces that map with the trailers it receives.
	if len(r.Trailer) > 0 && out.Body != nil { // no body, no trailer section to send
		out.Trailer = make(http.Header, len(r.Trailer))
		for k := range r.Trailer {
			out.Trailer[k] = nil
		}
		if b.Scheme == transport.SchemeHTTP {
			// Only a chunked HTTP/1.1 body has a trailer section
			// (RFC 9112 §7.1.2); the client's length is still enforced.
			out.ContentLength = -1
		}
	}
	// HTTP/1.1 backends can only get declared trailers: net/http writes a
	// trailer section only when the request had a Trailer map to start with.
	var tb *trailerBody
	if out.Body != nil && (out.Trailer != nil || b.Scheme != transport.SchemeHTTP || hook) {
		tb = &trailerBody{ReadCloser: out.Body, src: r}
		if out.Trailer != nil || b.Scheme != transport.SchemeHTTP {
			tb.dst = &out.Trailer
		}
		out.Body = tb
	}
	if out.Body != nil && cb.replay != nil {
		// The transports send again, on a new connection, what the backend
		// never processed, when they can get the body again: x/net/http2
		// the streams a graceful GOAWAY or REFUSED_STREAM left, net/http a
		// request it could not write at all (the transport-level part of
		// the retry policy: attempts.go).
		out.GetBody = tb.again(cb.replay)
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := out.Header["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		out.Header["X-Forwarded-For"] = []string{ip}
	}
	out.Header["X-Forwarded-Proto"] = []string{"https"}
	if r.Host != "" {
		out.Header["X-Forwarded-Host"] = []string{r.Host}
	}
	setClientCert(ctx, out.Header, r) // clientcert.go
	tt.SetFields(out.Header)          // traceparent, tracestate
	return out, tb
}

var (
	emptyValue = []string{""}
	chunkedTE  = []string{"chunked"}
)

// trailerBody is one try's reader of the request body. It copies the
// client's request trailers into the outgoing request once the body has
// been read to the end (HTTP/3 delivers them only then), and calls onEOF
// there: the request is fully sent, so the try's response-header timer
// starts.
type trailerBody struct {
	io.ReadCloser
	src   *http.Request
	dst   *http.Header // the outgoing request's Trailer; nil: none forwarded
	onEOF func()       // set by roundTrip before the round trip starts
}

// Read copies the received trailers, declared or not, into the outgoing
// request at the end of the body; what reaches the backend is up to its
// transport (see outgoing).
func (t *trailerBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	if err == io.EOF {
		if t.dst != nil && len(t.src.Trailer) > 0 {
			if *t.dst == nil {
				*t.dst = make(http.Header, len(t.src.Trailer))
			}
			for k, v := range t.src.Trailer {
				(*t.dst)[k] = v
			}
		}
		if t.onEOF != nil {
			t.onEOF()
		}
	}
	return n, err
}

// again is the GetBody of a try whose transport may send it again: a new
// reader of rb from the first byte, wrapped as t is (t nil: not wrapped).
func (t *trailerBody) again(rb *replayBody) func() (io.ReadCloser, error) {
	if t == nil {
		return rb.next
	}
	return func() (io.ReadCloser, error) {
		rc, err := rb.next()
		if err != nil {
			return nil, err
		}
		return &trailerBody{ReadCloser: rc, src: t.src, dst: t.dst, onEOF: t.onEOF}, nil
	}
}

// roundTrip sends one try of r to b, in ctx (r's context with the interim
// trace), its body taken from cb (nil: none). wait bounds the wait for
// response headers (0: none); own says the gateway times it itself: always
// for HTTP/2 backends, for HTTP/1.1 ones when the try's wait is shorter
// than net/http's own Transport.ResponseHeaderTimeout (a per_try_timeout).
// cause is the timer's cancellation cause (ErrResponseHeaderTimeout, or
// errPerTryTimeout which wraps it). The returned context carries the cause
// when that timer fired; the caller must call cancel once the response body
// is done. tt is the try's trace (nil: not traced).
func roundTrip(ctx context.Context, r *http.Request, b *upstream.Backend, cb *clientBody, wait time.Duration, own bool, cause error, tt *observe.TryTrace) (*http.Response, context.Context, context.CancelCauseFunc, error) {
	if !own || wait <= 0 {
		out, _ := outgoing(ctx, r, b, cb, false, tt)
		resp, err := b.Transport.RoundTrip(out)
		tt.RoundTripped()
		return resp, ctx, noCancel, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	out, body := outgoing(ctx, r, b, cb, true, tt)
	// As net/http's ResponseHeaderTimeout, the wait starts once the request
	// is fully sent: a client still sending its body is not the backend's
	// delay.
	var mu sync.Mutex
	var timer *time.Timer
	done := false
	startTimer := func() {
		mu.Lock()
		if !done && timer == nil {
			timer = time.AfterFunc(wait, func() { cancel(cause) })
		}
		mu.Unlock()
	}
	if body == nil {
		startTimer()
	} else {
		body.onEOF = startTimer
	}
	resp, err := b.Transport.RoundTrip(out)
	tt.RoundTripped()
	mu.Lock()
	done = true
	fired := timer != nil && !timer.Stop()
	mu.Unlock()
	if fired && err == nil {
		// The timer fired just as headers arrived; the body is already canceled.
		resp.Body.Close()
		resp, err = nil, cause
	}
	return resp, ctx, cancel, err
}

func noCancel(error) {}

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

// copyResponse writes the backend response to w, streaming the body and
// flushing each chunk so slow or long-lived responses reach the client as
// they arrive; a response without content (hasNoContent) gets its header
// only. It returns the body bytes written to w, and a backend read error
// or a client write error.
func copyResponse(w http.ResponseWriter, resp *http.Response, clientMajor int) (written int64, backendErr, clientErr error) {
	h := w.Header()
	removeHopHeaders(resp.Header)
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
	noContent := resp.Request != nil && hasNoContent(resp.Request.Method, resp.StatusCode)
	if noContent {
		fixNoContentFraming(h, resp.StatusCode)
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

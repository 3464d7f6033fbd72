package wire

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// Body is the client's request body as one try sends it.
type Body struct {
	// Reader is the try's reader; nil: the request goes without a body.
	Reader io.ReadCloser
	// Again returns a new reader from the body's first byte, for a
	// transport that sends the try again on a new connection (GetBody);
	// nil: the body cannot be sent again.
	Again func() (io.ReadCloser, error)
}

// Outgoing builds the backend request of one try: same method, path,
// query and authority; hop-by-hop fields removed; X-Forwarded-* set; the
// client's body (body, zero without one) streamed through the try's reader,
// wrapped (the returned *TrailerBody, nil when not needed) when trailers are
// forwarded or hook asks for the end-of-body signal (a timer of the try's
// own). Header values are shared with r, not copied (neither side modifies
// them): this is the hot path. tt is the try's trace (nil: not traced).
func Outgoing(ctx context.Context, r *http.Request, b *upstream.Backend, body Body, hook bool, tt *observe.TryTrace) (*http.Request, *TrailerBody) {
	h := make(http.Header, len(r.Header)+3)
	for k, v := range r.Header {
		h[k] = v
	}
	RemoveHopHeaders(h)
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
	if body.Reader != nil {
		out.Body = body.Reader
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
	var tb *TrailerBody
	if out.Body != nil && (out.Trailer != nil || b.Scheme != transport.SchemeHTTP || hook) {
		tb = &TrailerBody{ReadCloser: out.Body, src: r}
		if out.Trailer != nil || b.Scheme != transport.SchemeHTTP {
			tb.dst = &out.Trailer
		}
		out.Body = tb
	}
	if out.Body != nil && body.Again != nil {
		// The transports send again, on a new connection, what the backend
		// never processed, when they can get the body again: x/net/http2
		// the streams a graceful GOAWAY or REFUSED_STREAM left, net/http a
		// request it could not write at all (the transport-level part of
		// the retry policy).
		out.GetBody = tb.again(body.Again)
	}
	if ip, _, err := net.SplitHostPort(clientaddr.Peer(r)); err == nil { // the hop, not a client its headers named
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

// TrailerBody is one try's reader of the request body. It copies the
// client's request trailers into the outgoing request once the body has
// been read to the end (HTTP/3 delivers them only then), and calls onEOF
// there: the request is fully sent, so the try's response-header timer
// starts.
type TrailerBody struct {
	io.ReadCloser
	src *http.Request
	dst *http.Header // the outgoing request's Trailer; nil: none forwarded
	// OnEOF, when set before the round trip starts, is called there.
	OnEOF func()
}

// Read copies the received trailers, declared or not, into the outgoing
// request at the end of the body; what reaches the backend is up to its
// transport (see outgoing).
func (t *TrailerBody) Read(p []byte) (int, error) {
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
		if t.OnEOF != nil {
			t.OnEOF()
		}
	}
	return n, err
}

// again is the GetBody of a try whose transport may send it again: a new
// reader from the first byte (next), wrapped as t is (t nil: not wrapped).
func (t *TrailerBody) again(next func() (io.ReadCloser, error)) func() (io.ReadCloser, error) {
	if t == nil {
		return next
	}
	return func() (io.ReadCloser, error) {
		rc, err := next()
		if err != nil {
			return nil, err
		}
		return &TrailerBody{ReadCloser: rc, src: t.src, dst: t.dst, OnEOF: t.OnEOF}, nil
	}
}

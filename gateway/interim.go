package gateway

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/wire"
	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
)

// continueWait is how long the gateway waits for the backend's own answer to
// "Expect: 100-continue" (a 100 or a final status) before it sends the
// client a 100 itself, so a backend that ignores the expectation never
// stalls the client (RFC 9110 §10.1.1: a client waits only so long). The
// wait is the gateway's, for both backend protocols (their transports
// start reading the body at once). A variable for tests.
var continueWait = time.Second

// maxInterim is how many informational responses of one exchange are
// relayed; the next one fails the round trip (502). It is quic-go's and
// net/http's own client limit: more would make such clients fail anyway.
const maxInterim = 5

// errSwitchingProtocols: the gateway never forwards Upgrade (HTTP/3 has no
// 101, RFC 9114 §4.5), so a 101 answers a request that did not ask for it
// (RFC 9110 §15.2.2): the backend's response is invalid, a 502.
var errSwitchingProtocols = errors.New("backend sent 101 (Switching Protocols) to a request without Upgrade")

// errTooManyInterim: the backend sent more than maxInterim 1xx responses.
var errTooManyInterim = errors.New("backend sent too many 1xx informational responses")

// errBodyGivenUp is what a continueBody reads after the transport closed it.
var errBodyGivenUp = errors.New("request body closed by the transport")

// interim relays the backend's 1xx responses of one exchange to the client
// (RFC 9110 §15.2: a proxy forwards them) and, for a request with
// "Expect: 100-continue", sends the client a 100 itself when the backend is
// silent for continueWait. The transport calls it from its own goroutines
// while the handler waits in RoundTrip; finish ends that before the handler
// writes the final response, so the ResponseWriter is never used by two
// goroutines at once.
type interim struct {
	mu       sync.Mutex
	w        http.ResponseWriter
	final    bool          // the final response is being written: no more 1xx
	invalid  bool          // got1xx failed the round trip (a 101, too many 1xx)
	sent100  bool          // a 100 (Continue) went to the client
	sentReq  bool          // the request headers went to the backend
	other    bool          // a 1xx other than 100 (Continue) was relayed
	n        int           // 1xx responses relayed
	answered chan struct{} // closed on the backend's first 1xx or on finish; nil without Expect
	once     sync.Once
	trace    httptrace.ClientTrace
}

// withInterim returns r's context with a client trace that relays 1xx
// responses to w and, when r expects 100-continue and has a body, replaces
// r.Body (in place: quic-go keeps its own reference to the stream, and puts
// the received trailers on this request) with a body that sends the 100
// before its first read (see continueBody). Everything that reads the
// client's body reads it through r.Body, after this call. The caller must
// call finish once RoundTrip returned, before writing to w.
func withInterim(w http.ResponseWriter, r *http.Request) (context.Context, *interim) {
	iw := &interim{w: w}
	iw.trace.Got1xxResponse = iw.got1xx
	// Go's HTTP/1.1 and HTTP/2 servers answer the expectation themselves:
	// they send the 100 when the body is first read, which is when the
	// transport asks for it (a relayed 100 replaces theirs). Only quic-go
	// leaves it to the handler.
	if r.ProtoMajor == 3 && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 && expectsContinue(r.Header) {
		iw.trace.WroteHeaders = iw.wroteHeaders // only an Expect request needs it: one allocation less
		iw.answered = make(chan struct{})
		r.Body = &continueBody{ReadCloser: r.Body, iw: iw, closed: make(chan struct{})}
	}
	return httptrace.WithClientTrace(r.Context(), &iw.trace), iw
}

// expectsContinue reports whether h carries the 100-continue expectation
// (RFC 9110 §10.1.1; the token is case-insensitive).
func expectsContinue(h http.Header) bool {
	return httpguts.HeaderValuesContainsToken(h["Expect"], "100-continue")
}

// got1xx is the trace's Got1xxResponse: it forwards one informational
// response without the fields a 1xx must not carry, or fails the round trip.
func (iw *interim) got1xx(code int, h textproto.MIMEHeader) error {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	iw.signal()
	if iw.final {
		return nil
	}
	if code == http.StatusSwitchingProtocols {
		iw.invalid = true
		return errSwitchingProtocols
	}
	if iw.n++; iw.n > maxInterim {
		iw.invalid = true
		return errTooManyInterim
	}
	if code == http.StatusContinue {
		if iw.sent100 {
			return nil // the gateway's own 100 went first; one is enough
		}
		iw.sent100 = true
	} else {
		iw.other = true
	}
	dst := iw.w.Header()
	// The TCP ingress's own fields, for the final response: Alt-Svc, and
	// Connection: close after a chunked HTTP/1.1 request (adaptTCP).
	altSvc, hasAltSvc := dst["Alt-Svc"]
	conn, hasConn := dst["Connection"]
	clear(dst)
	for k, v := range h {
		dst[k] = v
	}
	wire.RemoveHopHeaders(dst)
	// A 1xx has no content: Content-Length is forbidden there
	// (RFC 9110 §8.6) and strict clients reset the stream on it.
	delete(dst, "Content-Length")
	delete(dst, "Alt-Svc")
	iw.w.WriteHeader(code)
	clear(dst) // the final response starts from an empty header
	if hasAltSvc {
		dst["Alt-Svc"] = altSvc
	}
	if hasConn {
		dst["Connection"] = conn
	}
	return nil
}

// wroteHeaders is the trace's WroteHeaders: the backend has the request
// headers, so it can answer the expectation itself.
func (iw *interim) wroteHeaders() {
	iw.mu.Lock()
	iw.sentReq = true
	iw.mu.Unlock()
}

// backendAsked reports whether the backend has been sent the request.
func (iw *interim) backendAsked() bool {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	return iw.sentReq
}

// send100 sends the gateway's own 100 (Continue) unless a 100 or the final
// response went first.
func (iw *interim) send100() {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	if iw.final || iw.sent100 {
		return
	}
	iw.sent100 = true
	iw.w.WriteHeader(http.StatusContinue)
}

// signal wakes a continueBody waiting for the backend's answer (answered
// is nil without one).
func (iw *interim) signal() {
	if iw.answered != nil {
		iw.once.Do(func() { close(iw.answered) })
	}
}

// finish marks the start of the final response: no 1xx is written after
// it. A nil iw (a hedged request: no 1xx relayed) has nothing to finish.
func (iw *interim) finish() {
	if iw == nil {
		return
	}
	iw.mu.Lock()
	iw.final = true
	iw.signal()
	iw.mu.Unlock()
}

// relayed reports whether a 1xx other than 100 (Continue) reached the
// client: the response has started, so the request is not retried. A
// 100 only tells the client to send its body, which a retry replays.
func (iw *interim) relayed() bool {
	if iw == nil {
		return false
	}
	iw.mu.Lock()
	defer iw.mu.Unlock()
	return iw.other
}

// reopen lets the next try of the exchange relay 1xx responses again,
// after finish; the previous try's round trip has returned.
func (iw *interim) reopen() {
	iw.mu.Lock()
	iw.final = false
	iw.mu.Unlock()
}

// continueBody is the body of a request that expects 100-continue: a client
// sends the body only after a 100 (or not at all after a final status), so
// its first Read first waits up to continueWait for the backend's answer
// and then sends the 100 itself (at once when the request has not gone to
// the backend yet: a read before the round trip). Nothing is read from the client before the
// transport asks for the body: a backend that refuses at once (413) gets no
// body, and the client is told to stop with STOP_SENDING H3_NO_ERROR when
// the handler ends (RFC 9114 §4.1).
type continueBody struct {
	io.ReadCloser
	iw        *interim
	started   bool
	closed    chan struct{}
	closeOnce sync.Once
}

func (b *continueBody) Read(p []byte) (int, error) {
	if !b.started && !b.iw.backendAsked() {
		// Read before the round trip (a probe for whether there is a
		// body at all): the backend cannot answer yet, so the client gets
		// its 100 at once rather than wait for nothing.
		b.started = true
		b.iw.send100()
	}
	if !b.started {
		b.started = true
		t := time.NewTimer(continueWait)
		select {
		case <-b.iw.answered:
		case <-t.C:
		case <-b.closed:
		}
		t.Stop()
		select {
		case <-b.closed:
			return 0, errBodyGivenUp
		default:
		}
		b.iw.send100()
	}
	return b.ReadCloser.Read(p)
}

// Close is the transport giving the body up (the backend answered without
// wanting it, or its connection broke; x/net/http2 then waits for its
// pending Read). A read deadline in the past ends that Read; the client's
// stream is stopped when the handler ends, with H3_NO_ERROR, instead of the
// H3_REQUEST_CANCELLED that closing quic-go's body would send.
func (b *continueBody) Close() error {
	b.closeOnce.Do(func() {
		close(b.closed)
		_ = http.NewResponseController(b.iw.w).SetReadDeadline(time.Now())
	})
	return nil
}

// invalidResponse reports whether the round trip failed on the backend's
// invalid use of 1xx responses (errSwitchingProtocols, errTooManyInterim):
// x/net/http2 does not wrap the error it got from the trace, so got1xx
// records it. Call it after finish.
func (iw *interim) invalidResponse(err error) bool {
	return iw != nil && iw.invalid || errors.Is(err, errSwitchingProtocols) || errors.Is(err, errTooManyInterim) || interimEndedStream(err)
}

// interimEndedStream: x/net/http2 refused a 1xx HEADERS frame that ended
// the stream (a 1xx is never final, RFC 9113 §8.1) before the trace saw it,
// and reset the stream with PROTOCOL_ERROR. Only its message identifies it.
func interimEndedStream(err error) bool {
	var se http2.StreamError
	return errors.As(err, &se) && se.Code == http2.ErrCodeProtocol && se.Cause != nil &&
		strings.Contains(se.Cause.Error(), "1xx informational response with END_STREAM")
}

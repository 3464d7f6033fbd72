package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// errGRPCDeadline is the cause of a call's context when its grpc-timeout
// passed.
var errGRPCDeadline = errors.New("gRPC deadline (grpc-timeout) exceeded at the gateway")

// parseGRPCTimeout parses a grpc-timeout value (gRPC over HTTP/2,
// "Requests": TimeoutValue is a positive integer of at most 8 ASCII digits,
// TimeoutUnit one of H, M, S, m, u, n for hours, minutes, seconds,
// milliseconds, microseconds, nanoseconds). ok is false for anything else:
// no digits, more than 8, a sign, spaces, another unit. "0" with a unit is
// taken as an expired deadline, as grpc-go does; a duration beyond
// time.Duration's range (about 292 years) is clamped to it.
func parseGRPCTimeout(v string) (d time.Duration, ok bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	var unit time.Duration
	switch v[len(v)-1] {
	case 'H':
		unit = time.Hour
	case 'M':
		unit = time.Minute
	case 'S':
		unit = time.Second
	case 'm':
		unit = time.Millisecond
	case 'u':
		unit = time.Microsecond
	case 'n':
		unit = time.Nanosecond
	default:
		return 0, false
	}
	var n int64
	for _, c := range []byte(v[:len(v)-1]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0') // at most 99999999: no overflow
	}
	if n > math.MaxInt64/int64(unit) {
		return time.Duration(math.MaxInt64), true
	}
	return time.Duration(n) * unit, true
}

// grpcCall is what the pipeline keeps for one gRPC request (content-type
// application/grpc*; nil for any other request, and every method takes a
// nil receiver): its deadline, and where the response's message framing
// stands so that the gateway can end a started response with a gRPC status
// in trailers instead of a stream reset.
type grpcCall struct {
	w http.ResponseWriter
	r *http.Request
	// hasTimeout: a grpc-timeout was sent; badTimeout: it was malformed.
	hasTimeout, badTimeout bool
	deadline               time.Time   // arrival + grpc-timeout, when hasTimeout
	frames                 *grpcFrames // the response's message framing; nil until a gRPC response started
}

// newGRPCCall is the grpcCall of r, nil when r is not a gRPC request.
// start is when the request arrived: the deadline counts from there.
func newGRPCCall(w http.ResponseWriter, r *http.Request, start time.Time) *grpcCall {
	if !wire.IsGRPC(r.Header) {
		return nil
	}
	c := &grpcCall{w: w, r: r}
	if vs := r.Header["Grpc-Timeout"]; len(vs) > 0 {
		c.hasTimeout = true
		d, ok := parseGRPCTimeout(vs[0])
		c.badTimeout = !ok || len(vs) > 1
		c.deadline = start.Add(d)
	}
	return c
}

// invalidTimeout reports whether the call's grpc-timeout is malformed
// (or sent twice). The gateway answers INTERNAL, as grpc-go's server does,
// rather than forwarding a call it cannot bound.
func (c *grpcCall) invalidTimeout() bool { return c != nil && c.badTimeout }

// withDeadline bounds ctx by the call's grpc-timeout, counted from the
// request's arrival; the context's cause is errGRPCDeadline once it passed.
// The grpc-timeout field itself still goes to the backend, which enforces
// it too. stop releases the timer.
func (c *grpcCall) withDeadline(ctx context.Context) (_ context.Context, stop func()) {
	if c == nil || !c.hasTimeout || c.badTimeout {
		return ctx, func() {}
	}
	ctx, cancel := context.WithDeadlineCause(ctx, c.deadline, errGRPCDeadline)
	return ctx, cancel
}

// expired reports whether the call's deadline has passed (and the client
// is still there). It asks the clock, not the deadline's timer: a backend
// that enforces the forwarded grpc-timeout itself (grpc-go resets the
// stream with CANCEL) counts from a later start, so its reset arrives when
// the deadline has passed here, though maybe before the gateway's timer ran.
func (c *grpcCall) expired() bool {
	return c != nil && c.hasTimeout && !c.badTimeout && !time.Now().Before(c.deadline) && c.r.Context().Err() == nil
}

// watch starts following the message framing of resp's body when it is a
// gRPC response with a streamed body (HTTP 200, application/grpc*, no
// Trailers-Only); resp.Body is replaced by a reader that tracks it.
func (c *grpcCall) watch(resp *http.Response) {
	if c == nil || resp.StatusCode != http.StatusOK || !wire.IsGRPC(resp.Header) || resp.ContentLength >= 0 ||
		resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	if _, trailersOnly := resp.Header["Grpc-Status"]; trailersOnly {
		return
	}
	c.frames = new(grpcFrames)
	resp.Body = &grpcBody{ReadCloser: resp.Body, f: c.frames}
}

// end ends a started gRPC response with trailers carrying the gRPC status of
// the gateway's answer a and its reason, when that can be
// done cleanly: the response is a gRPC stream, everything forwarded so far
// ends on a message boundary, and the client speaks HTTP/2 or HTTP/3 (the
// handler returning sends the trailers, a HEADERS frame, and ends the
// stream). It reports false otherwise: the caller resets the stream.
func (c *grpcCall) end(a answer.Answer) bool {
	if c == nil || c.frames == nil || !c.frames.atBoundary() || c.r.ProtoMajor < 2 {
		return false
	}
	h := c.w.Header()
	h[http.TrailerPrefix+"Grpc-Status"] = []string{strconv.Itoa(a.GRPC)}
	h[http.TrailerPrefix+"Grpc-Message"] = []string{url.PathEscape(a.Reason)}
	h[http.TrailerPrefix+"X-Impulse-Error"] = []string{a.Reason}
	return true
}

// grpcFrames follows the length-prefixed message framing of a gRPC body
// (gRPC over HTTP/2, "Length-Prefixed-Message": a compressed flag byte, a
// 4-byte big-endian length, the message) as bytes pass.
type grpcFrames struct {
	prefix  [5]byte
	nPrefix int    // prefix bytes seen of the current message
	left    uint64 // message bytes still to come
}

// feed takes the next bytes of the body.
func (f *grpcFrames) feed(p []byte) {
	for len(p) > 0 {
		if f.left > 0 {
			n := min(uint64(len(p)), f.left)
			f.left -= n
			p = p[n:]
			continue
		}
		c := copy(f.prefix[f.nPrefix:], p)
		f.nPrefix += c
		p = p[c:]
		if f.nPrefix == len(f.prefix) {
			f.left, f.nPrefix = uint64(binary.BigEndian.Uint32(f.prefix[1:])), 0
		}
	}
}

// atBoundary reports whether the bytes fed so far are whole messages.
func (f *grpcFrames) atBoundary() bool { return f.nPrefix == 0 && f.left == 0 }

// grpcBody is a response body whose bytes feed a grpcFrames as they are
// read (on the handler's goroutine, as every use of the frames).
type grpcBody struct {
	io.ReadCloser
	f *grpcFrames
}

func (b *grpcBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.f.feed(p[:n])
	return n, err
}

// gRPC status codes the gateway answers with (grpc/grpc doc/statuscodes.md).
const (
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnimplemented     = 12
	grpcDeadlineExceeded  = 4
	grpcResourceExhausted = 8
	grpcUnknown           = 2
	grpcCanceled          = 1
	grpcPermissionDenied  = 7
	grpcUnauthenticated   = 16
)

// writeGRPCError answers a gRPC request with a's Trailers-Only response
// (gRPC over HTTP/2, "Responses"): HTTP 200, content-type application/grpc,
// grpc-status and grpc-message (the x-impulse-error reason, percent-encoded
// as the spec asks) in the only header section, and no body, so the
// stream ends with it.
func writeGRPCError(w http.ResponseWriter, a answer.Answer) {
	h := w.Header()
	h["Content-Type"] = []string{"application/grpc"}
	h["Grpc-Status"] = []string{strconv.Itoa(a.GRPC)}
	h["Grpc-Message"] = []string{url.PathEscape(a.Reason)}
	h["X-Impulse-Error"] = []string{a.Reason}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusOK)
}

// grpcCodeNames are the canonical names of the gRPC status codes
// (grpc/grpc doc/statuscodes.md), the grpc_status label.
var grpcCodeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
	"PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// grpcCodeName is the canonical name of a grpc-status value: UNKNOWN for a
// code outside 0..16 or a value that is not a number (grpc-go reports a
// malformed grpc-status as UNKNOWN too), so the label set stays bounded.
func grpcCodeName(v string) string {
	if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < len(grpcCodeNames) {
		return grpcCodeNames[n]
	}
	return grpcCodeNames[grpcUnknown]
}

// grpcOutcome is the gRPC status the client of a gRPC call ends up with,
// as the code name recorded next to the HTTP status (status, as recorded):
// the grpc-status the response carried (trailers, or the Trailers-Only
// header section, the gateway's own answers included); else CANCELLED for
// a client that went away (499); else INTERNAL for a gRPC response that
// ended without a status (a stream reset after it started: grpc-go reports
// RST_STREAM INTERNAL_ERROR so); else what a gRPC client makes of the HTTP
// status ("HTTP to gRPC Status Code Mapping", grpc/grpc
// doc/http-grpc-status-mapping.md, as grpc-go applies it).
func (c *grpcCall) outcome(status int) string {
	h := c.w.Header()
	if v := h[http.TrailerPrefix+"Grpc-Status"]; len(v) > 0 {
		return grpcCodeName(v[0])
	}
	if v := h["Grpc-Status"]; len(v) > 0 {
		return grpcCodeName(v[0])
	}
	switch {
	case status == transport.StatusClientClosed:
		return grpcCodeNames[grpcCanceled]
	case c.frames != nil:
		return grpcCodeNames[grpcInternal]
	}
	return grpcCodeNames[grpcStatusOfHTTP(status)]
}

// grpcStatusOfHTTP is the gRPC status a client derives from a response's
// HTTP status when it carries no grpc-status.
func grpcStatusOfHTTP(status int) int {
	switch status {
	case http.StatusBadRequest:
		return grpcInternal
	case http.StatusUnauthorized:
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound:
		return grpcUnimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return grpcUnavailable
	case http.StatusOK:
		return grpcInternal // a 200 without grpc-status (or not gRPC at all)
	}
	return grpcUnknown
}

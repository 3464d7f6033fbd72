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
	if !isGRPC(r.Header) {
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
	if c == nil || resp.StatusCode != http.StatusOK || !isGRPC(resp.Header) || resp.ContentLength >= 0 ||
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

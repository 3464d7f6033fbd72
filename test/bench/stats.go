package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math"
	"net"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank method: the smallest sample such that at least p% of the
// samples are less than or equal to it. It returns 0 for no samples; p <= 0
// gives the minimum.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Latency summarises a set of request latencies, in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P90  float64 `json:"p90_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
	Mean float64 `json:"mean_ms"`
}

// Summarize sorts samples in place and returns their percentiles.
func Summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	var sum time.Duration
	for _, s := range samples {
		sum += s
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return Latency{
		P50:  ms(Percentile(samples, 50)),
		P90:  ms(Percentile(samples, 90)),
		P99:  ms(Percentile(samples, 99)),
		Max:  ms(samples[len(samples)-1]),
		Mean: ms(sum / time.Duration(len(samples))),
	}
}

// Median returns the median of xs (the mean of the two middle values for an
// even count) without modifying xs; NaN for no values.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// errShortBody reports a response body shorter (or longer) than its
// Content-Length or the expected size.
var errShortBody = errors.New("body length differs from the expected size")

// statusError is a completed exchange with a non-2xx status.
type statusError struct{ code int }

func (e statusError) Error() string { return "status " + strconv.Itoa(e.code) }

// ErrorKind names the class of a failed request for the error tally:
// "status_NNN", "timeout", "refused", "reset", "stream_reset",
// "conn_closed", "idle_timeout", "handshake_timeout", "quic_transport",
// "h3_error", "tls", "short_body", "canceled" or "other".
func ErrorKind(err error) string {
	if se, ok := errors.AsType[statusError](err); ok {
		return "status_" + strconv.Itoa(se.code)
	}
	if errors.Is(err, errShortBody) || errors.Is(err, io.ErrUnexpectedEOF) {
		return "short_body"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	if _, ok := errors.AsType[*quic.IdleTimeoutError](err); ok {
		return "idle_timeout"
	}
	if _, ok := errors.AsType[*quic.HandshakeTimeoutError](err); ok {
		return "handshake_timeout"
	}
	if _, ok := errors.AsType[*http3.Error](err); ok {
		return "h3_error"
	}
	if _, ok := errors.AsType[*quic.StreamError](err); ok {
		return "stream_reset"
	}
	if _, ok := errors.AsType[*quic.ApplicationError](err); ok {
		return "conn_closed"
	}
	if _, ok := errors.AsType[*quic.TransportError](err); ok {
		return "quic_transport"
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return "refused"
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return "reset"
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return "tls"
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return "tls"
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return "tls"
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return "timeout"
	}
	return "other"
}

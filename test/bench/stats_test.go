package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond // 1..100 ms
	}
	cases := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single p50", ms(7), 50, 7 * time.Millisecond},
		{"single p99", ms(7), 99, 7 * time.Millisecond},
		{"p0 is the minimum", ms(1, 2, 3), 0, time.Millisecond},
		{"p100 is the maximum", ms(1, 2, 3), 100, 3 * time.Millisecond},
		{"p50 of 4 is the 2nd", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p51 of 4 is the 3rd", ms(1, 2, 3, 4), 51, 3 * time.Millisecond},
		{"p50 of 1..100", hundred, 50, 50 * time.Millisecond},
		{"p90 of 1..100", hundred, 90, 90 * time.Millisecond},
		{"p99 of 1..100", hundred, 99, 99 * time.Millisecond},
		{"p99.9 of 1..100", hundred, 99.9, 100 * time.Millisecond},
		{"p above 100 clamps", ms(1, 2), 150, 2 * time.Millisecond},
	}
	for _, c := range cases {
		if got := Percentile(c.sorted, c.p); got != c.want {
			t.Errorf("%s: Percentile(p=%v) = %v, want %v", c.name, c.p, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	// Unsorted input; Summarize sorts it.
	var s []time.Duration
	for i := 200; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	got := Summarize(s)
	want := Latency{P50: 100, P90: 180, P99: 198, Max: 200, Mean: 100.5}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if z := Summarize(nil); z != (Latency{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", z)
	}
}

func TestMedian(t *testing.T) {
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) should be NaN")
	}
	xs := []float64{5, 1, 3}
	if m := Median(xs); m != 3 {
		t.Errorf("Median odd = %v, want 3", m)
	}
	if xs[0] != 5 {
		t.Error("Median modified its input")
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("Median even = %v, want 2.5", m)
	}
}

func TestErrorKind(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{statusError{502}, "status_502"},
		{fmt.Errorf("wrapped: %w", statusError{404}), "status_404"},
		{errShortBody, "short_body"},
		{io.ErrUnexpectedEOF, "short_body"},
		{context.DeadlineExceeded, "timeout"},
		{context.Canceled, "canceled"},
		{&quic.IdleTimeoutError{}, "idle_timeout"},
		{&quic.HandshakeTimeoutError{}, "handshake_timeout"},
		{&quic.StreamError{StreamID: 4, ErrorCode: 0x102, Remote: true}, "stream_reset"},
		{&quic.ApplicationError{ErrorCode: 0x100, Remote: true}, "conn_closed"},
		{&quic.TransportError{ErrorCode: quic.ProtocolViolation}, "quic_transport"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "refused"},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), "reset"},
		{errors.New("something else"), "other"},
	}
	for _, c := range cases {
		if got := ErrorKind(c.err); got != c.want {
			t.Errorf("ErrorKind(%T %v) = %q, want %q", c.err, c.err, got, c.want)
		}
	}
}

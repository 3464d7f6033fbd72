package main

import (
	"math"
	"testing"
)

func TestTableString(t *testing.T) {
	tb := &Table{
		Title:  "── shape ──",
		Header: []string{"target", "req/s", "p99"},
		Notes:  []string{"  a note"},
	}
	tb.AddRow("bare quic-go h3", "27593", "5.26 ms")
	tb.AddRow("impulse-agent → h1", "9001", "12.0 ms")
	tb.AddRow("short")
	want := "── shape ──\n" +
		"target              req/s      p99\n" +
		"----------------------------------\n" +
		"bare quic-go h3     27593  5.26 ms\n" +
		"impulse-agent → h1   9001  12.0 ms\n" +
		"short\n" +
		"  a note\n"
	if got := tb.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

func TestFormatters(t *testing.T) {
	cases := []struct{ got, want string }{
		{fmtMS(0.4321), "0.43 ms"},
		{fmtMS(12.34), "12.3 ms"},
		{fmtMS(1234.5), "1234 ms"},
		{fmtMS(math.NaN()), "–"},
		{fmtRatio(1.234), "1.23×"},
		{fmtRatio(math.NaN()), "–"},
		{fmtRatio(math.Inf(1)), "–"},
		{fmtFloat(27593.4, 0), "27593"},
		{fmtBytes(1536), "1.5 KiB"},
		{fmtBytes(23.5 * (1 << 20)), "23.5 MiB"},
		{fmtBytes(1 << 30), "1.00 GiB"},
		{fmtBytes(-2048), "-2.0 KiB"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	if !math.IsNaN(ratio(1, 0)) || ratio(3, 2) != 1.5 {
		t.Error("ratio")
	}
}

func TestVerdict(t *testing.T) {
	cases := []struct {
		value, bound float64
		atMost       bool
		want         string
	}{
		{1.9, 2.0, true, "met"},
		{2.0, 2.0, true, "met"},
		{2.2, 2.0, true, "≈ (noise)"}, // 10% over
		{2.4, 2.0, true, "missed"},    // 20% over
		{2.1, 2.0, false, "met"},
		{1.8, 2.0, false, "≈ (noise)"}, // 10% under
		{1.6, 2.0, false, "missed"},
		{math.NaN(), 2.0, true, "n/a"},
	}
	for _, c := range cases {
		if got := Verdict(c.value, c.bound, c.atMost, 0.15); got != c.want {
			t.Errorf("Verdict(%v, %v, atMost=%v) = %q, want %q", c.value, c.bound, c.atMost, got, c.want)
		}
	}
}

package main

import (
	"math"
	"testing"
)

func TestRotate(t *testing.T) {
	xs := []string{"a", "b", "c"}
	for r, want := range []string{"abc", "bca", "cab", "abc"} {
		got := ""
		for _, x := range rotate(xs, r) {
			got += x
		}
		if got != want {
			t.Errorf("rotate(%d) = %s, want %s", r, got, want)
		}
	}
}

func TestMatrixShapes(t *testing.T) {
	sh := matrixShapes()
	if len(sh) != 6 {
		t.Fatalf("%d shapes, want 6", len(sh))
	}
	if got := sh[0].title(); got != "small GET (64 B), 1 conn × 50 streams" {
		t.Errorf("title = %q", got)
	}
	if got := sh[1].title(); got != "small GET (64 B), 50 conns × 1 stream" {
		t.Errorf("title = %q", got)
	}
}

func TestShapeRate(t *testing.T) {
	small := shape{}
	if rps, cpu := small.rate(Result{ReqPerSec: 1000, CPUPerReqUS: 40, MiB: 5, MiBPerSec: 2.5}); rps != 1000 || cpu != 40 {
		t.Errorf("small: %v req/s, %v µs", rps, cpu)
	}
	// 1 MiB shape: 50 MiB moved in 2 s with 0.5 CPU s = 25 req/s and
	// 10,000 µs per request, whatever the number of completed requests.
	bulk := shape{bulkMiB: 1}
	rps, cpu := bulk.rate(Result{ReqPerSec: 20, CPUPerReqUS: 12500, MiB: 50, MiBPerSec: 25, ServerCPU: 0.5, Seconds: 2})
	if rps != 25 || math.Abs(cpu-10000) > 1e-6 {
		t.Errorf("bulk: %v req/s, %v µs", rps, cpu)
	}
}

func TestSummarizeRuns(t *testing.T) {
	rs := []Result{
		{ReqPerSec: 100, CPUPerReqUS: 30, Latency: Latency{P99: 5}, ErrorCount: 1, Errors: map[string]int64{"timeout": 1}, ErrorSamples: map[string]string{"timeout": "x"}},
		{ReqPerSec: 300, CPUPerReqUS: 10, Latency: Latency{P99: 9}},
		{ReqPerSec: 200, CPUPerReqUS: 20, Latency: Latency{P99: 7}},
	}
	s := summarize(shape{}, rs)
	if s.rps != 200 || s.cpuPerReq != 20 || s.p99 != 7 || s.errors != 1 || s.errKinds["timeout"] != 1 {
		t.Errorf("summarize = %+v", s)
	}
}

func TestVerdictBeyondCeiling(t *testing.T) {
	sh := shape{key: "up", conns: 1, streams: 50}
	tests := []struct {
		name               string
		bare, agent, caddy float64
		want               string
	}{
		{"met", 400, 300, 140, "met"},
		{"missed below the ceiling", 400, 200, 150, "missed"},
		{"missed above the ceiling", 400, 315, 207, "unreachable: 2× Caddy = 1.03× bare"},
	}
	for _, tt := range tests {
		v := &verdicts{noise: 0.15}
		v.matrix(sh, map[string]summary{keyBare: {rps: tt.bare}, keyAgentH1: {rps: tt.agent}, keyCaddy: {rps: tt.caddy}})
		if got := v.rows[0].result; got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

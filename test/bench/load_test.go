package main

import (
	"context"
	"encoding/pem"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPatternReader(t *testing.T) {
	const n = 200_000 // spans several 64 KiB blocks
	b, err := io.ReadAll(newPatternReader(n))
	if err != nil || len(b) != n {
		t.Fatalf("read %d bytes, %v; want %d", len(b), err, n)
	}
	for i := range b {
		if b[i] != patternBlock[i%len(patternBlock)] {
			t.Fatalf("byte %d differs from the pattern", i)
		}
	}
}

// TestRunLoadHTTP1 drives the payload handler over HTTP/1.1 in both modes.
func TestRunLoadHTTP1(t *testing.T) {
	srv := httptest.NewServer(payloadHandler())
	defer srv.Close()
	base := LoadConfig{Proto: "h1", Conns: 2, Streams: 3, Method: "GET", Expect: -1, Timeout: 5 * time.Second, PIDs: []int{os.Getpid()}}

	cfg := base
	cfg.URL, cfg.Expect, cfg.Requests = srv.URL+"/small", smallSize, 50
	res, err := RunLoad(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 50 || res.ErrorCount != 0 {
		t.Errorf("count mode: %d ok, %d errors %v; want 50, 0", res.Requests, res.ErrorCount, res.ErrorSamples)
	}
	if res.Latency.P50 <= 0 || res.Latency.P99 < res.Latency.P50 || res.Latency.Max < res.Latency.P99 {
		t.Errorf("latency %+v", res.Latency)
	}

	cfg = base
	cfg.URL, cfg.Method, cfg.BodySize, cfg.Duration, cfg.Warmup = srv.URL+"/upload", "POST", oneMiB, 300*time.Millisecond, 100*time.Millisecond
	if res, err = RunLoad(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.ErrorCount != 0 || res.Seconds != 0.3 {
		t.Errorf("duration mode: %+v", res)
	}

	// A wrong expected size and a 404 are counted by kind.
	cfg = base
	cfg.URL, cfg.Expect, cfg.Requests = srv.URL+"/small", 65, 5
	if res, _ = RunLoad(context.Background(), cfg); res.Errors["short_body"] != 5 {
		t.Errorf("expect mismatch: errors %v", res.Errors)
	}
	cfg.URL, cfg.Expect = srv.URL+"/nope", -1
	if res, _ = RunLoad(context.Background(), cfg); res.Errors["status_404"] != 5 {
		t.Errorf("404: errors %v", res.Errors)
	}
}

// TestRunLoadHTTP2 drives the payload handler over HTTP/2 with TLS.
func TestRunLoadHTTP2(t *testing.T) {
	srv := httptest.NewUnstartedServer(payloadHandler())
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := LoadConfig{Proto: "h2", URL: srv.URL + "/1m", Conns: 1, Streams: 4, Method: "GET", Expect: oneMiB,
		Requests: 20, Timeout: 5 * time.Second, CACert: ca}
	res, err := RunLoad(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 20 || res.ErrorCount != 0 {
		t.Errorf("%d ok, errors %v", res.Requests, res.ErrorSamples)
	}
}

func TestRunLoadRejectsBadConfig(t *testing.T) {
	for _, cfg := range []LoadConfig{
		{Proto: "h4", URL: "https://x/", Conns: 1, Streams: 1, Requests: 1},
		{Proto: "h3", URL: "https:///small", Conns: 1, Streams: 1, Requests: 1},
		{Proto: "h3", URL: "https://x/", Conns: 0, Streams: 1, Requests: 1},
		{Proto: "h3", URL: "https://x/", Conns: 1, Streams: 1},
	} {
		if _, err := RunLoad(context.Background(), cfg); err == nil {
			t.Errorf("%+v: want an error", cfg)
		}
	}
}

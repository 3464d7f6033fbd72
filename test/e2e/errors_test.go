package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// TestErrorStatuses checks the answers the gateway produces itself, end to
// end over HTTP/3: 404 no_route, 502 for a backend that refuses connections
// or resets before answering, 504 for a response_header timeout, and a
// stream reset (never a clean end of a truncated body) when the backend
// fails mid-body, over HTTP/1.1 and HTTP/2 backends.
func TestErrorStatuses(t *testing.T) {
	ok1 := newHTTP1Backend(t, "ok-1")
	h2 := newH2Backend(t, "h2-1")
	down := &backend{Name: "down-1", URL: fmt.Sprintf("http://127.0.0.1:%d", refusingPort(t))}
	cfg := baseHCL() +
		staticUpstreamHCL("ok", "/ok/", "", ok1) +
		staticUpstreamHCL("down", "/down/", "", down) +
		staticUpstreamHCL("slow", "/stall", "  timeouts {\n    response_header = \"200ms\"\n  }\n", ok1) +
		staticUpstreamHCL("h1", "/", "", ok1) +
		staticUpstreamHCL("h2", "/h2/", tlsHCL(h2.CAFile), h2)
	// /ok/, /down/, /stall and /h2/ go to their upstreams, everything else to
	// ok-1 over HTTP/1.1 (the 404 case runs an agent without a catch-all).
	a := startAgent(t, cfg)
	c, _ := newH3Client(t)

	expect := func(path string, status int, reason string) time.Duration {
		t.Helper()
		start := time.Now()
		r := mustGet(t, c, a.URL(path))
		took := time.Since(start)
		if r.Status != status || r.Header.Get("X-Impulse-Error") != reason {
			t.Errorf("GET %s: %d x-impulse-error=%q body %q; want %d %q", path, r.Status, r.Header.Get("X-Impulse-Error"), r.Body, status, reason)
		}
		return took
	}

	t.Run("200", func(t *testing.T) {
		if r := mustGet(t, c, a.URL("/ok/x")); r.Status != 200 || r.Body != "hello from ok-1\n" {
			t.Fatalf("GET /ok/x: %d %q", r.Status, r.Body)
		}
	})
	t.Run("404_no_route", func(t *testing.T) {
		b := startAgent(t, baseHCL()+staticUpstreamHCL("ok", "/ok/", "", ok1))
		cb, _ := newH3Client(t)
		r := mustGet(t, cb, b.URL("/nothing/here"))
		if r.Status != http.StatusNotFound || r.Header.Get("X-Impulse-Error") != "no_route" {
			t.Errorf("GET /nothing/here: %d x-impulse-error=%q body %q; want 404 no_route", r.Status, r.Header.Get("X-Impulse-Error"), r.Body)
		}
		b.Stop()
	})
	t.Run("502_connect_refused", func(t *testing.T) {
		expect("/down/x", http.StatusBadGateway, "backend_connect_failed")
	})
	t.Run("502_reset_before_response", func(t *testing.T) {
		expect("/reset", http.StatusBadGateway, "backend_reset")
	})
	t.Run("504_response_header_timeout", func(t *testing.T) {
		took := expect("/stall?sleep=3s", http.StatusGatewayTimeout, "response_header_timeout")
		t.Logf("504 after %s (response_header = 200ms)", took.Round(time.Millisecond))
		if took > 1500*time.Millisecond {
			t.Errorf("504 took %s, want about 200ms", took)
		}
	})
	for _, tc := range []struct{ name, path string }{
		{"http1_content_length", "/truncate?cl=1"},
		{"http1_chunked", "/truncate"},
		{"h2_content_length", "/h2/truncate?cl=1"},
		{"h2_no_length", "/h2/truncate"},
	} {
		t.Run("mid_body_failure_"+tc.name, func(t *testing.T) {
			path := tc.path
			// The gateway has sent 200 and part of the body when it resets
			// the stream; a reset may discard data not yet delivered, the
			// HEADERS frame included, so the error shows either while
			// reading the headers or while reading the body. Never a clean
			// end of a truncated body.
			var n int64
			resp, err := c.Get(a.URL(path))
			if err == nil {
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: status %d, want 200 then a reset", path, resp.StatusCode)
				}
				n, err = io.Copy(io.Discard, resp.Body)
				if err == nil {
					t.Fatalf("GET %s: body ended cleanly after %d bytes of a truncated response", path, n)
				}
			}
			var h3err *http3.Error
			if !errors.As(err, &h3err) {
				t.Errorf("GET %s: error %v (%T) after %d body bytes, want an HTTP/3 stream error", path, err, err, n)
			}
			t.Logf("GET %s: %d bytes, then %v", path, n, err)
		})
	}
	a.Stop()
}

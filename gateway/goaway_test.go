package gateway

import (
	"bytes"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestB22GracefulGoAwayCostsNoRequest: an HTTP/2 backend answers ten
// streams per connection, then sends GOAWAY(NO_ERROR) with a last-stream-id
// below streams the gateway has already sent. Those were never processed
// (RFC 9113 §6.8), so they are sent again on a new connection, POSTs with
// their bodies included: 100 concurrent GETs and 100 concurrent 2 KiB POSTs
// all succeed, each POST reaches the backend whole exactly once per answer,
// and the backend's health is untouched (one failure would eject it).
func TestB22GracefulGoAwayCostsNoRequest(t *testing.T) {
	fb := testbackend.NewFrameBackend(t, 10, 10)
	uc := staticUpstream("u", "/", fb.Server)
	// x/net/http2 replays a stream at once, but backs off (1 s, 2 s, ...)
	// before replaying one a second time; the timeout leaves it room.
	uc.ResponseHeaderTimeout = 2 * time.Minute
	uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
	h := newHarness(t, uc)
	body := bytes.Repeat([]byte("x"), 2048)
	for _, method := range []string{"GET", "POST"} {
		var wg sync.WaitGroup
		var mu sync.Mutex
		byCode := map[int]int{}
		for range 100 {
			wg.Go(func() {
				var rd io.Reader
				if method == "POST" {
					rd = bytes.NewReader(body)
				}
				req, _ := http.NewRequest(method, h.base+"/b22", rd)
				code := 0
				if resp, err := h.client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				} else {
					t.Log(err)
				}
				mu.Lock()
				byCode[code]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if byCode[200] != 100 {
			t.Errorf("%s: statuses %v, want 100 × 200", method, byCode)
		}
	}
	replayed := 0
	for _, st := range fb.Unprocessed() {
		if st.Method == "POST" {
			replayed++
		}
	}
	t.Logf("answered %d, left unprocessed %d (%d POSTs)", len(fb.Answered()), len(fb.Unprocessed()), replayed)
	for _, st := range fb.Answered() {
		if st.Method == "POST" && st.Body != len(body) {
			t.Errorf("a POST reached the backend with %d of %d body bytes", st.Body, len(body))
		}
	}
	for _, bi := range h.gw.Backends() {
		if bi.Ejected || !bi.Eligible {
			t.Errorf("a graceful GOAWAY counted against backend %s: %+v", bi.ID, bi)
		}
	}
}

// TestB22GracefulGoAwayIsNotABackendFailure: a POST too long to keep for a
// replay (128 KiB) that a graceful GOAWAY leaves unprocessed after its body
// started fails (502), but never counts against the backend's health: with
// consecutive_failures = 1 one such failure would eject it.
func TestB22GracefulGoAwayIsNotABackendFailure(t *testing.T) {
	fb := testbackend.NewFrameBackend(t, 2, 10)
	uc := staticUpstream("u", "/", fb.Server)
	uc.ResponseHeaderTimeout = 30 * time.Second
	uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
	h := newHarness(t, uc)
	body := bytes.Repeat([]byte("x"), 128<<10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	byCode := map[int]int{}
	for range 30 {
		wg.Go(func() {
			code := 0
			if resp, err := h.client.Post(h.base+"/big", "application/octet-stream", bytes.NewReader(body)); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				code = resp.StatusCode
			}
			mu.Lock()
			byCode[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("statuses %v", byCode)
	if byCode[200]+byCode[502] != 30 {
		t.Errorf("statuses %v, want only 200 and 502", byCode)
	}
	for _, bi := range h.gw.Backends() {
		if bi.Ejected || !bi.Eligible {
			t.Errorf("a graceful GOAWAY counted against backend %s: %+v", bi.ID, bi)
		}
	}
}

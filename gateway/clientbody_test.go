package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestIncompleteRequestBodyIsTheClients: a request whose stream ends before
// its Content-Length is malformed (RFC 9114 §4.1.2). The client gets a
// stream error H3_MESSAGE_ERROR, not a 502, and the backend is not
// penalised: with consecutive_failures = 1 it would otherwise be ejected.
func TestIncompleteRequestBodyIsTheClients(t *testing.T) {
	forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
		var served atomic.Int64
		hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			served.Add(1)
			io.WriteString(w, "ok")
		})
		uc := staticUpstream("web", "/", backendOver(t, proto, hf), backendOver(t, proto, hf))
		uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
		h := newHarness(t, uc)
		for range 4 {
			req, _ := http.NewRequest("POST", h.base+"/upload", strings.NewReader("ten bytes!"))
			req.ContentLength = 100000
			resp, err := h.client.Do(req)
			if err == nil {
				resp.Body.Close()
				t.Fatalf("got %d %q, want a stream error", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
			}
			var he *http3.Error
			if !errors.As(err, &he) || he.ErrorCode != http3.ErrCodeMessageError {
				t.Fatalf("got %v, want stream error H3_MESSAGE_ERROR", err)
			}
		}
		for _, bi := range h.gw.Backends() {
			if bi.Ejected || !bi.Eligible {
				t.Fatalf("a client's incomplete body ejected backend %s: %+v", bi.ID, bi)
			}
		}
		resp := h.get("/")
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("after the bad requests: %d", resp.StatusCode)
		}
		// Nothing is left in flight: the drain ends at once. (quic-go's
		// client drops a connection that saw a stream error from its pool
		// without closing it, so the drain runs before the harness closes
		// the client.)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := h.gw.Shutdown(ctx); err != nil {
			t.Fatalf("drain after the bad requests: %v", err)
		}
	})
}

// TestSlowRequestBodyIsNotHeldBack: coalescing a body of known length never
// holds bytes back for long; a client sending 1 KiB every 100 ms (64 KiB
// declared, so the body is coalesced) has each piece at the backend within
// the 20 ms window.
func TestSlowRequestBodyIsNotHeldBack(t *testing.T) {
	const pieces = 5
	got := make(chan time.Time, pieces) // when the backend had each KiB
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64<<10)
		total := 0
		for {
			n, err := r.Body.Read(buf)
			for k := total / 1024; k < (total+n)/1024 && k < pieces; k++ {
				got <- time.Now()
			}
			total += n
			if err != nil {
				break
			}
		}
		io.WriteString(w, "ok")
	}))
	h := newHarness(t, staticUpstream("u", "/", be))
	pr, pw := io.Pipe()
	sent := make(chan time.Time, pieces)
	go func() {
		for range pieces {
			sent <- time.Now()
			pw.Write(bytes.Repeat([]byte("x"), 1024))
			time.Sleep(100 * time.Millisecond)
		}
		pw.Write(make([]byte, (64-pieces)*1024))
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", h.base+"/", pr)
	req.ContentLength = 64 << 10
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for i := range pieces {
		s, g := <-sent, <-got
		// The window (20 ms) is the bound; allow scheduling slack, but less
		// than the client's 100 ms pause.
		if lag := g.Sub(s); lag > 90*time.Millisecond {
			t.Errorf("piece %d reached the backend %v after it was sent", i, lag)
		}
	}
}

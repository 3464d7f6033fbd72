package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLargeTransfers: 50 MiB down and 50 MiB up through the gateway, to an
// HTTP/1.1 backend and to an HTTP/2-over-TLS backend, SHA-256 checked both
// ways.
func TestLargeTransfers(t *testing.T) {
	h1 := newHTTP1Backend(t, "big-h1")
	h2 := newH2Backend(t, "big-h2")
	a := startAgent(t, baseHCL()+
		staticUpstreamHCL("h1", "/h1/", "", h1)+
		staticUpstreamHCL("h2", "/h2/", tlsHCL(h2.CAFile), h2))
	c, _ := newH3Client(t)
	const size = 50 * MiB
	want := patternSHA256(size)

	for _, be := range []struct {
		prefix string
		b      *backend
	}{{"/h1", h1}, {"/h2", h2}} {
		t.Run("download"+be.prefix, func(t *testing.T) {
			start := time.Now()
			resp, err := c.Get(a.URL(fmt.Sprintf("%s/bytes?size=%d", be.prefix, size)))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Backend") != be.b.Name {
				t.Fatalf("status %d from %q", resp.StatusCode, resp.Header.Get("X-Backend"))
			}
			h := newCountingHash()
			if _, err := io.CopyBuffer(h, resp.Body, make([]byte, 256<<10)); err != nil {
				t.Fatalf("after %d bytes: %v", h.n, err)
			}
			if h.n != size || h.Sum() != want {
				t.Fatalf("got %d bytes sha256 %s, want %d bytes %s", h.n, h.Sum(), int64(size), want)
			}
			el := time.Since(start)
			t.Logf("50 MiB down via %s in %s (%.0f MiB/s)", be.b.Name, el.Round(time.Millisecond), float64(size)/MiB/el.Seconds())
		})
		for _, chunked := range []bool{false, true} {
			name := "upload" + be.prefix
			if chunked {
				name += "_unknown_length"
			}
			t.Run(name, func(t *testing.T) {
				start := time.Now()
				req, err := http.NewRequest(http.MethodPost, a.URL(be.prefix+"/upload"), newPatternReader(size))
				if err != nil {
					t.Fatal(err)
				}
				req.ContentLength = size
				if chunked {
					req.ContentLength = -1
				}
				r, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(r.Body)
				r.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if got, exp := string(body), fmt.Sprintf("bytes=%d sha256=%s", size, want); r.StatusCode != http.StatusOK || got != exp {
					t.Fatalf("%d %q, want 200 %q", r.StatusCode, got, exp)
				}
				el := time.Since(start)
				t.Logf("50 MiB up via %s in %s (%.0f MiB/s)", be.b.Name, el.Round(time.Millisecond), float64(size)/MiB/el.Seconds())
			})
		}
	}
	for _, be := range []struct {
		prefix string
		b      *backend
	}{{"/h1", h1}, {"/h2", h2}} {
		// A client that gives up mid-download: the backend request ends
		// (in_flight back to 0).
		t.Run("client_abort_download"+be.prefix, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, a.URL(fmt.Sprintf("%s/bytes?size=%d", be.prefix, size)), nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.CopyN(io.Discard, resp.Body, MiB); err != nil {
				t.Fatal(err)
			}
			cancel()
			resp.Body.Close()
			waitFor(t, 5*time.Second, be.b.Name+" in_flight back to 0", func() bool { return inFlight(a, be.b.Name) == 0 })
		})
		// A client that gives up mid-upload (unknown length, so only the
		// stream reset tells the end): the backend must see a failed body,
		// never a clean end of a truncated one.
		t.Run("client_abort_upload"+be.prefix, func(t *testing.T) {
			for len(be.b.uploads) > 0 {
				<-be.b.uploads
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			pr, pw := io.Pipe()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.URL(be.prefix+"/upload"), pr)
			req.ContentLength = -1
			done := make(chan error, 1)
			go func() {
				resp, err := c.Do(req)
				if err == nil {
					resp.Body.Close()
					err = fmt.Errorf("answered %d", resp.StatusCode)
				}
				done <- err
			}()
			if _, err := io.CopyN(pw, newPatternReader(size), 2*MiB); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, be.b.Name+" to be receiving the upload", func() bool { return inFlight(a, be.b.Name) == 1 })
			cancel()
			pw.CloseWithError(context.Canceled)
			t.Logf("client: %v", <-done)
			select {
			case outcome := <-be.b.uploads:
				t.Logf("backend: %s", outcome)
				if !strings.HasPrefix(outcome, "error") {
					t.Errorf("an upload the client aborted reached %s as a complete body: %s", be.b.Name, outcome)
				}
			case <-time.After(5 * time.Second):
				t.Errorf("%s's upload handler did not finish 5s after the client aborted", be.b.Name)
			}
			waitFor(t, 5*time.Second, be.b.Name+" in_flight back to 0", func() bool { return inFlight(a, be.b.Name) == 0 })
		})
	}
	a.Stop()
}

// inFlight is the in_flight count /v1/backends reports for backend id.
func inFlight(a *agentProc, id string) int64 {
	for _, b := range a.backends() {
		if b.ID == id {
			return b.InFlight
		}
	}
	a.t.Fatalf("no backend %q in /v1/backends", id)
	return -1
}

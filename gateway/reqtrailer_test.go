package gateway

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// trailerReader is a request body that sets the request's trailers when it
// reaches its end, after an optional pause before that end (a client that
// delays its FIN).
type trailerReader struct {
	r       io.Reader
	req     *http.Request
	trailer http.Header
	pause   time.Duration
}

func (t *trailerReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err == io.EOF {
		time.Sleep(t.pause)
		for k, v := range t.trailer {
			t.req.Trailer[k] = v
		}
	}
	return n, err
}

// TestRequestTrailersReachBackend: trailers the client declared reach both
// backend protocols, with or without a Content-Length (HTTP/1.1 backends get
// the body chunked: only a chunked body has a trailer section).
func TestRequestTrailersReachBackend(t *testing.T) {
	forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
		got := make(chan http.Header, 1)
		hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			got <- r.Trailer.Clone()
		})
		be := backendOver(t, proto, hf)
		h := newHarness(t, staticUpstream("u", "/", be))
		for _, unknownLength := range []bool{false, true} {
			body := "ten bytes!"
			req, _ := http.NewRequest("POST", h.base+"/", nil)
			req.Trailer = http.Header{"X-Sum": nil}
			req.Body = io.NopCloser(&trailerReader{r: strings.NewReader(body), req: req,
				trailer: http.Header{"X-Sum": {"abc"}}})
			req.ContentLength = int64(len(body))
			if unknownLength {
				req.ContentLength = -1
			}
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if tr := <-got; tr.Get("X-Sum") != "abc" {
				t.Fatalf("unknown length %v: backend trailers %v, want X-Sum: abc", unknownLength, tr)
			}
		}
	})
}

// TestResponseHeaderTimeoutStartsAfterTheBody: an HTTP/2 backend is not timed
// out (504, and a failure on its record) while the client is still sending
// its request: the response_header wait starts once the body has been sent,
// as net/http's does for HTTP/1.1 backends.
func TestResponseHeaderTimeoutStartsAfterTheBody(t *testing.T) {
	forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
		hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			io.WriteString(w, "ok")
		})
		be := backendOver(t, proto, hf)
		uc := staticUpstream("u", "/", be)
		uc.ResponseHeaderTimeout = 200 * time.Millisecond
		h := newHarness(t, uc)
		req, _ := http.NewRequest("POST", h.base+"/", nil)
		req.Trailer = http.Header{}
		req.Body = io.NopCloser(&trailerReader{r: strings.NewReader("12345"), req: req, pause: 600 * time.Millisecond})
		req.ContentLength = 5
		wantOK(t, h, req)
	})
}

// wantOK sends req through h and requires a 200.
func wantOK(t *testing.T, h *harness, req *http.Request) {
	t.Helper()
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %q, want 200", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
	}
}

// TestTrailersWithoutBody: a request that declares trailers but has no body
// reaches an HTTP/2 backend as a complete request (its trailers dropped),
// not as a stream left open until the response_header timeout blames the
// backend.
func TestTrailersWithoutBody(t *testing.T) {
	be := testbackend.NewH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	uc := staticUpstream("u", "/", be)
	uc.ResponseHeaderTimeout = time.Second
	h := newHarness(t, uc)
	req, _ := http.NewRequest("GET", h.base+"/", nil)
	req.Trailer = http.Header{"X-T": nil}
	req.Body = io.NopCloser(&trailerReader{r: strings.NewReader(""), req: req, trailer: http.Header{"X-T": {"1"}}})
	wantOK(t, h, req)
}

package gateway

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// countingUpstream is upstream "u", every path, to an HTTP/1.1 backend
// that counts in c what reached it and answers "ok".
func countingUpstream(t *testing.T, c *testbackend.Counter) UpstreamConfig {
	return staticUpstream("u", "/", testbackend.NewH1(t, testbackend.OK(c)))
}

// do sends one request and returns its status and x-impulse-error, or the
// error.
func (h *harness) do(method, path string, body io.Reader, length int64, hdr http.Header) (int, string, error) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.base+path, body)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.ContentLength = length
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Impulse-Error"), nil
}

// TestLimitURITooLong: a request target longer than max_uri_bytes gets
// 414 uri_too_long from the pipeline over every protocol, before routing.
func TestLimitURITooLong(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		var cb testbackend.Counter
		h := startHarness(t, ListenerConfig{Limits: Limits{MaxURIBytes: 100}}, proto, countingUpstream(t, &cb))
		long := "/" + strings.Repeat("a", 60) + "?" + strings.Repeat("q", 60)
		if code, reason, err := h.do("GET", long, nil, 0, nil); err != nil || code != 414 || reason != answer.URITooLong.Reason {
			t.Errorf("121-byte target: %d %q %v, want 414 %s", code, reason, err, answer.URITooLong.Reason)
		}
		if code, _, err := h.do("GET", "/"+strings.Repeat("a", 99), nil, 0, nil); err != nil || code != 200 {
			t.Errorf("100-byte target: %d %v, want 200", code, err)
		}
		if n := cb.Total.Load(); n != 1 {
			t.Errorf("backend saw %d requests, want 1", n)
		}
		if n := requestsCountedOver(h.gw, proto, "", "4xx", answer.URITooLong.Reason); n != 1 {
			t.Errorf("414s counted: %d", n)
		}
	})
}

// TestLimitHeaderBytes: a header section beyond max_header_bytes gets 431
// from the servers themselves (Go's for HTTP/1.1, quic-go's for HTTP/3;
// HTTP/2 is in TestLimitHeaderBytesH2, Go's client refusing to send it)
// and never reaches the backend.
func TestLimitHeaderBytes(t *testing.T) {
	forProtocols(t, except(protocols, ProtocolH2), func(t *testing.T, proto string) {
		var cb testbackend.Counter
		h := startHarness(t, ListenerConfig{Limits: Limits{MaxHeaderBytes: 4096}}, proto, countingUpstream(t, &cb))
		big := http.Header{"X-Big": {strings.Repeat("b", 16<<10)}}
		if code, _, err := h.do("GET", "/", nil, 0, big); err != nil || code != 431 {
			t.Errorf("16 KiB header: %d %v, want 431", code, err)
		}
		small := http.Header{"X-Small": {strings.Repeat("s", 1024)}}
		if code, _, err := h.do("GET", "/", nil, 0, small); err != nil || code != 200 {
			t.Errorf("1 KiB header: %d %v, want 200", code, err)
		}
		if n := cb.Total.Load(); n != 1 {
			t.Errorf("backend saw %d requests, want 1", n)
		}
	})
}

// TestLimitRequestBody: max_request_body_bytes answers a Content-Length
// beyond it with 413 body_too_large before anything is forwarded, cuts a
// body of unknown length at the limit (the backend never gets more), and
// an upstream's own limit replaces the listener's, up or down.
func TestLimitRequestBody(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		var cb testbackend.Counter
		def := countingUpstream(t, &cb)
		bigger, smaller := def, def
		def.Routes = []RouteConfig{{PathPrefix: "/"}}
		bigger.Name, bigger.Routes, bigger.MaxRequestBodyBytes = "bigger", []RouteConfig{{PathPrefix: "/bigger"}}, 5000
		smaller.Name, smaller.Routes, smaller.MaxRequestBodyBytes = "smaller", []RouteConfig{{PathPrefix: "/smaller"}}, 10
		h := startHarness(t, ListenerConfig{Limits: Limits{MaxRequestBodyBytes: 1000}}, proto, def, bigger, smaller)

		body := func(n int) io.Reader { return strings.NewReader(strings.Repeat("x", n)) }
		for _, c := range []struct {
			path   string
			n      int
			status int
		}{
			{"/", 1000, 200}, {"/", 1001, 413}, {"/bigger", 5000, 200}, {"/bigger", 5001, 413},
			{"/smaller", 10, 200}, {"/smaller", 11, 413},
		} {
			before := cb.Total.Load()
			code, reason, err := h.do("POST", c.path, body(c.n), int64(c.n), nil)
			if err != nil || code != c.status || (c.status == 413 && reason != answer.BodyTooLarge.Reason) {
				t.Errorf("%s with Content-Length %d: %d %q %v, want %d", c.path, c.n, code, reason, err, c.status)
			}
			if c.status == 413 && cb.Total.Load() != before {
				t.Errorf("%s with Content-Length %d reached the backend", c.path, c.n)
			}
		}

		// Unknown length: cut at the limit. The client may see the 413
		// or, having sent more than the gateway read, an error.
		cb.MaxBody.Store(0)
		code, reason, err := h.do("POST", "/", io.MultiReader(body(3000)), -1, nil)
		if err == nil && (code != 413 || reason != answer.BodyTooLarge.Reason) {
			t.Errorf("3000-byte stream: %d %q, want 413 %s", code, reason, answer.BodyTooLarge.Reason)
		}
		if n := cb.MaxBody.Load(); n > 1000 {
			t.Errorf("the backend got %d bytes of a body limited to 1000", n)
		}
		if code, _, err := h.do("POST", "/", io.MultiReader(body(1000)), -1, nil); err != nil || code != 200 || cb.MaxBody.Load() != 1000 {
			t.Errorf("1000-byte stream: %d %v, backend got %d bytes", code, err, cb.MaxBody.Load())
		}
	})
}

// stalledBody is a request body that sends its first bytes, then nothing
// until the client's transport closes it (the exchange is over).
type stalledBody struct {
	first   string
	release chan struct{}
	once    sync.Once
}

func newStalledBody(first string) *stalledBody {
	return &stalledBody{first: first, release: make(chan struct{})}
}

func (s *stalledBody) Read(p []byte) (int, error) {
	if s.first != "" {
		n := copy(p, s.first)
		s.first = s.first[n:]
		return n, nil
	}
	<-s.release
	return 0, io.ErrClosedPipe
}

func (s *stalledBody) Close() error {
	s.once.Do(func() { close(s.release) })
	return nil
}

// TestLimitClientBodyTimeout: a client that stalls its body for
// client_body_timeout gets 408 client_body_timeout (or its stream reset)
// over every protocol, and the backend is not blamed: with
// consecutive_failures = 1 it would otherwise be ejected. A slow body
// whose bytes keep coming is not cut.
func TestLimitClientBodyTimeout(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		var cb testbackend.Counter
		uc := countingUpstream(t, &cb)
		uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
		h := startHarness(t, ListenerConfig{Limits: Limits{ClientBodyTimeout: 500 * time.Millisecond}}, proto, uc)

		for _, length := range []int64{-1, 100} { // streamed, and with a Content-Length
			sb := newStalledBody("hello")
			code, reason, err := h.do("POST", "/", sb, length, nil)
			sb.Close()
			if err == nil && (code != 408 || reason != answer.ClientBodyTimeout.Reason) {
				t.Errorf("stalled body (length %d): %d %q, want 408 %s", length, code, reason, answer.ClientBodyTimeout.Reason)
			}
		}
		if n := requestsCountedOver(h.gw, proto, "u", "4xx", answer.ClientBodyTimeout.Reason); n != 2 {
			t.Errorf("408s counted: %d, want 2", n)
		}
		for _, bi := range h.gw.Backends() {
			if bi.Ejected || !bi.Eligible {
				t.Fatalf("a client's stalled body ejected backend %s: %+v", bi.ID, bi)
			}
		}

		pr, pw := io.Pipe()
		go func() {
			for range 5 {
				pw.Write([]byte("slow "))
				time.Sleep(50 * time.Millisecond)
			}
			pw.Close()
		}()
		if code, _, err := h.do("POST", "/", pr, -1, nil); err != nil || code != 200 {
			t.Errorf("a slow but steady body: %d %v, want 200", code, err)
		}
	})
}

// TestBodyOfUnknownLengthArrivingLater: a body without a Content-Length
// whose bytes arrive only after the request reached the pipeline is
// forwarded whole over every protocol. (settleBody's read with a deadline
// in the past is for QUIC streams only: on HTTP/1.1 it timed out the
// connection, which cancels the request, and on HTTP/2 it closes the body.)
func TestBodyOfUnknownLengthArrivingLater(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		var cb testbackend.Counter
		h := newHarnessOver(t, proto, countingUpstream(t, &cb))
		l := h.gw.listeners["test"]
		pr, pw := io.Pipe()
		go func() {
			for deadline := time.Now().Add(10 * time.Second); l.InFlight() == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			pw.Write([]byte("late body"))
			pw.Close()
		}()
		if code, _, err := h.do("POST", "/", pr, -1, nil); err != nil || code != 200 || cb.MaxBody.Load() != 9 {
			t.Errorf("%d %v; the backend got %d bytes of 9", code, err, cb.MaxBody.Load())
		}
	})
}

package gateway

import (
	"bytes"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Regression tests for what the fuzz targets (fuzz_*_test.go) found.

// TestConnectionCannotStrikeRequestID: an HTTP/1.1 client naming
// x-request-id in Connection does not keep the request ID from the
// backend, its own (sane) one or a made-up one; a field it names that is
// truly the client's still goes (FuzzOutgoingHeaders).
func TestConnectionCannotStrikeRequestID(t *testing.T) {
	be := &idBackend{}
	var gotSecret []string
	h := newHarnessOver(t, ProtocolH1, staticUpstream("u", "/", testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotSecret = r.Header.Values("X-Secret")
		be.ServeHTTP(w, r)
	}))))
	for _, ids := range [][]string{{"client-id-1"}, nil} {
		resp := getWithIDs(t, h, "/a", ids, http.Header{"Connection": {"X-Request-Id, X-Secret"}, "X-Secret": {"s"}})
		seen := be.ids()
		last := seen[len(seen)-1]
		if resp.StatusCode != 200 || len(last) != 1 || last[0] != resp.Header.Get("X-Request-Id") {
			t.Fatalf("sent %q: status %d, backend got x-request-id %q, client %q", ids, resp.StatusCode, last, resp.Header.Values("X-Request-Id"))
		}
		if ids != nil && last[0] != ids[0] {
			t.Fatalf("backend got %q, want the client's %q", last, ids)
		}
		if gotSecret != nil {
			t.Fatalf("X-Secret, named in Connection, reached the backend: %q", gotSecret)
		}
	}
}

// TestInvalidMethodIsMalformed: a :method that is not a token is an invalid
// pseudo-header value, so the request is malformed: 400 invalid_method over
// HTTP/2, never forwarded. Go's HTTP/2 server passes it: it reached h2c
// backends as sent, and failed as a 502 backend_reset against HTTP/1.1
// ones, whose transport refuses it (FuzzIngress). quic-go refuses it
// itself (H3_MESSAGE_ERROR, not counted) and Go's HTTP/1.1 server too.
func TestInvalidMethodIsMalformed(t *testing.T) {
	methods := []string{`"x`, "G(T", "GE T", "G\u00e9T", "A/B"}
	t.Run("h3", func(t *testing.T) {
		var hits atomic.Int64
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
		h := newHarness(t, staticUpstream("u", "/", be))
		conn := dialRaw(t, h)
		for _, m := range methods {
			wantMessageError(t, conn, headersFrame(fields(":method", m, ":scheme", "https", ":authority", "localhost", ":path", "/")...))
		}
		if n := hits.Load(); n != 0 {
			t.Fatalf("the backend received %d requests", n)
		}
	})
	t.Run("h2", func(t *testing.T) {
		h := newIngressHarness(t)
		for _, m := range methods {
			for _, path := range []string{"/", "/h2c/x"} {
				out := h.exchange(t, h2Request(":method: "+m+"\n:scheme: https\n:authority: a.example\n:path: "+path, nil))
				if st, reason := h2Answer(t, out); st != "400" || reason != answer.InvalidMethod.Reason {
					t.Fatalf("%q %s: answered %s %q, want 400 %s", m, path, st, reason, answer.InvalidMethod.Reason)
				}
				if _, n := h.be.take(); n != 0 {
					t.Fatalf("%q %s: the backend got %d requests", m, path, n)
				}
			}
		}
		if n := requestsCounted(h.gw, "fuzz", "", "4xx", answer.InvalidMethod.Reason); n != uint64(2*len(methods)) {
			t.Fatalf("counted %d requests 4xx invalid_method, want %d", n, 2*len(methods))
		}
	})
}

// h2Answer is the :status and x-impulse-error of the first response on
// stream 1 in a server's HTTP/2 output.
func h2Answer(t *testing.T, out []byte) (status, reason string) {
	t.Helper()
	fr := http2.NewFramer(nil, bytes.NewReader(out))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no response on stream 1: %v", err)
		}
		if mh, ok := f.(*http2.MetaHeadersFrame); ok && mh.StreamID == 1 {
			for _, hf := range mh.Fields {
				if hf.Name == "x-impulse-error" {
					reason = hf.Value
				}
			}
			return mh.PseudoValue("status"), reason
		}
	}
}

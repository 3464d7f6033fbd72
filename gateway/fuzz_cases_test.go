package gateway

import (
	"net/http"
	"testing"
)

// Regression tests for what the fuzz targets (fuzz_*_test.go) found.

// TestConnectionCannotStrikeRequestID: an HTTP/1.1 client naming
// x-request-id in Connection does not keep the request ID from the
// backend, its own (sane) one or a made-up one; a field it names that is
// truly the client's still goes (FuzzOutgoingHeaders).
func TestConnectionCannotStrikeRequestID(t *testing.T) {
	be := &idBackend{}
	var gotSecret []string
	h := newHarnessOver(t, ProtocolH1, staticUpstream("u", "/", newH1Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

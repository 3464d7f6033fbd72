package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/quic-go/quic-go"
)

// seen records which backend got the last request and its request-target.
type seen struct {
	mu           sync.Mutex
	backend, uri string
}

func (s *seen) handler(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.backend, s.uri = name, r.RequestURI
		s.mu.Unlock()
		io.WriteString(w, name)
	})
}

func (s *seen) take() (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, u := s.backend, s.uri
	s.backend, s.uri = "", ""
	return b, u
}

// rawGet sends one GET with :path exactly p (no client-side cleaning) on
// conn and returns the response's :status and body, or the stream error.
func rawGet(t *testing.T, conn *quic.Conn, p string) (status, body string, err error) {
	t.Helper()
	str := openStream(t, conn)
	if _, err := str.Write(headersFrame(reqFields("GET", p)...)); err != nil {
		t.Fatal(err)
	}
	str.Close()
	return readRawResponse(str)
}

// readRawResponse reads a whole response stream: its final :status (past
// interim responses) and its body, or the stream error.
func readRawResponse(str *quic.Stream) (status, body string, err error) {
	frames, err := readH3Frames(str)
	if err != nil {
		return "", "", err
	}
	for _, f := range frames {
		switch {
		case f.typ == 0x01 && status == "":
			if st, _ := f.field(":status"); !strings.HasPrefix(st, "1") {
				status = st
			}
		case f.typ == 0x00:
			body += string(f.payload)
		}
	}
	return status, body, nil
}

// TestPathNormalisationRouting: requests sent raw, with paths a client
// library would clean, are routed by their RFC 3986 normal form; what the
// backend receives depends on the settings; and the route chosen is the one
// a client asking for the normalised path directly gets.
func TestPathNormalisationRouting(t *testing.T) {
	var s seen
	// admin is an HTTP/2 backend: both protocols get the normal form.
	api, admin, root := testbackend.NewH1(t, s.handler("api")), testbackend.NewH2(t, s.handler("admin")), testbackend.NewH1(t, s.handler("root"))
	h := newHarness(t, staticUpstream("api", "/api/", api), staticUpstream("admin", "/admin", admin), staticUpstream("root", "/", root))
	conn := dialRaw(t, h)
	forwardAsSent := pathnorm.PathOptions{ForwardAsSent: true}
	merge := pathnorm.PathOptions{MergeSlashes: true}
	keep := pathnorm.PathOptions{EscapedSlashes: pathnorm.EscapedSlashesKeep}
	unescape := pathnorm.PathOptions{EscapedSlashes: pathnorm.EscapedSlashesUnescape}
	for _, c := range []struct {
		name    string
		o       pathnorm.PathOptions
		path    string
		backend string // "" wants 400 invalid_path
		got     string // what the backend receives
	}{
		{"dot-dot", pathnorm.PathOptions{}, "/api/../admin", "admin", "/admin"},
		{"encoded dots", pathnorm.PathOptions{}, "/api/%2e%2E/admin", "admin", "/admin"},
		{"dot", pathnorm.PathOptions{}, "/api/x/./y", "api", "/api/x/y"},
		{"trailing dot-dot", pathnorm.PathOptions{}, "/api/x/..", "api", "/api/"},
		{"unreserved escapes, query untouched", pathnorm.PathOptions{}, "/api/%7eu%2Dv?q=%2e%2e/x&r=%7e", "api", "/api/~u-v?q=%2e%2e/x&r=%7e"},
		{"hex case", pathnorm.PathOptions{}, "/api/caf%c3%a9", "api", "/api/caf%C3%A9"},
		{"double encoding is data", pathnorm.PathOptions{}, "/api/%252e%252e/admin", "api", "/api/%252e%252e/admin"},
		{"slashes kept", pathnorm.PathOptions{}, "/api//x", "api", "/api//x"},
		{"slashes kept, same route merged", pathnorm.PathOptions{}, "//x", "root", "//x"},
		// A backend merging slashes (nginx) or dropping ";" parameters
		// (servlet containers) would serve these as /api/x, past the
		// /api/ route's policies: refused.
		{"slashes reaching another route merged", pathnorm.PathOptions{}, "//api/x", "", ""},
		{"a parameter reaching another route dropped", pathnorm.PathOptions{}, "/api;jsessionid=1/x", "", ""},
		{"a parameter on the same route", pathnorm.PathOptions{}, "/api/x;v=1", "api", "/api/x;v=1"},
		{"empty segment popped", pathnorm.PathOptions{}, "/api//../admin", "api", "/api/admin"},
		{"encoded slash", pathnorm.PathOptions{}, "/api/..%2Fadmin", "", ""},
		{"encoded backslash", pathnorm.PathOptions{}, "/api/..%5cadmin", "", ""},
		{"backslash", pathnorm.PathOptions{}, "/api\\..\\admin", "", ""},
		{"climb above root", pathnorm.PathOptions{}, "/api/../../admin", "", ""},
		{"dot-dot with a parameter", pathnorm.PathOptions{}, "/api/..;/admin", "", ""},
		{"encoded NUL", pathnorm.PathOptions{}, "/api/a%00", "", ""},
		{"encoded CR LF", pathnorm.PathOptions{}, "/api/a%0d%0aX-Injected:%201", "", ""},
		{"forward as sent", forwardAsSent, "/api/../admin", "admin", "/api/../admin"},
		{"forward as sent, clean", forwardAsSent, "/api/%7eu", "api", "/api/%7eu"},
		// Go's url.URL re-encodes a whole path with a byte it must escape
		// from the decoded form: "!" became "%21", "%2F" a slash
		// (FuzzNormalizeTarget). Only that byte is encoded now.
		{"forward as sent, a quote", forwardAsSent, "/api/!x\"", "api", "/api/!x%22"},
		{"forward as sent, keep, a quote", pathnorm.PathOptions{ForwardAsSent: true, EscapedSlashes: pathnorm.EscapedSlashesKeep},
			"/api%2F..%2Fadmin\"", "root", "/api%2F..%2Fadmin%22"},
		{"merge", merge, "//api//x", "api", "/api/x"},
		{"merge, then dots", merge, "/api//../admin", "admin", "/admin"},
		{"keep", keep, "/api/..%2fadmin", "api", "/api/..%2Fadmin"},
		{"keep backslash", keep, "/api/a\\b", "api", "/api/a%5Cb"},
		{"keep, one segment", keep, "/api%2F..%2Fadmin", "root", "/api%2F..%2Fadmin"},
		{"unescape", unescape, "/api/..%2Fadmin", "admin", "/admin"},
		{"unescape backslash", unescape, "/api%5C..%5cadmin", "admin", "/admin"},
		{"unescape literal backslash", unescape, "/api\\..\\admin", "admin", "/admin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.gw.paths.Store(&c.o)
			status, body, err := rawGet(t, conn, c.path)
			if err != nil {
				t.Fatalf("%q: %v", c.path, err)
			}
			backend, got := s.take()
			if c.backend == "" {
				if status != "400" || !strings.Contains(body, "invalid_path") || backend != "" {
					t.Fatalf("%q: %s %q, backend %q; want 400 invalid_path, no backend", c.path, status, body, backend)
				}
				return
			}
			if status != "200" || backend != c.backend || got != c.got {
				t.Fatalf("%q: %s %q, backend %q got %q; want %s got %q", c.path, status, body, backend, got, c.backend, c.got)
			}
			if c.o.ForwardAsSent {
				return
			}
			// A client asking for the normalised path directly gets the
			// same route and the same request at the backend.
			resp := h.get(got)
			resp.Body.Close()
			if b2, got2 := s.take(); b2 != backend || got2 != got {
				t.Fatalf("normalised %q: backend %q got %q; the raw request went to %q", got, b2, got2, backend)
			}
		})
	}
}

// TestPathsApply: the path settings arrive with New and change with Apply.
func TestPathsApply(t *testing.T) {
	want := pathnorm.PathOptions{MergeSlashes: true, EscapedSlashes: pathnorm.EscapedSlashesUnescape}
	g, err := New(Config{Paths: want})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown(context.Background())
	if got := *g.paths.Load(); got != want {
		t.Fatalf("after New: %+v", got)
	}
	if err := g.Apply(context.Background(), Config{}); err != nil {
		t.Fatal(err)
	}
	if got := *g.paths.Load(); got != (pathnorm.PathOptions{}) {
		t.Fatalf("after Apply: %+v", got)
	}
}

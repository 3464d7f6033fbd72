package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/headers"
	"github.com/impulse-agent/impulse-agent/gateway/rewrite"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// targetEcho is a backend that answers with the request-target it got
// (X-Target) and the fields it got (X-Got-<name>: every value, joined by
// " | ").
func targetEcho(t *testing.T, fields ...string) *httptest.Server {
	return testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Target", r.RequestURI)
		for _, f := range fields {
			if v, ok := r.Header[http.CanonicalHeaderKey(f)]; ok {
				w.Header().Set("X-Got-"+f, strings.Join(v, " | "))
			}
		}
		w.Header().Set("Server", "backend/1.0")
		w.Write([]byte("ok"))
	}))
}

// TestN01StripAndRewriteThePrefix: case N01 over every ingress. Route
// "/api" (segment-wise: "/api" and "/api/...", not "/apix") with
// strip_prefix, route "/v1/" with prefix_rewrite "/internal/v1/": the
// backend gets "/users?x=1", "/" and "/internal/v1/a"; an encoded slash
// keeps its escaping (escaped_slashes = "keep" here: forwarded as "%2F");
// the access log has the path as sent and upstream_path as forwarded (no
// upstream_path on a route without a rewrite).
func TestN01StripAndRewriteThePrefix(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := targetEcho(t)
		uc := staticUpstream("web", "/", be)
		uc.Routes = []RouteConfig{
			{PathPrefix: "/api", Rewrite: rewrite.Config{StripPrefix: true}},
			{PathPrefix: "/v1/", Rewrite: rewrite.Config{PrefixRewrite: "/internal/v1/"}},
			{PathPrefix: "/plain/"},
		}
		sink := &logSink{}
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{uc}, AccessLog: &accesslog.Config{Writer: sink},
			Paths: pathnorm.PathOptions{EscapedSlashes: pathnorm.EscapedSlashesKeep}}, ListenerConfig{}, proto)
		cases := []struct{ path, want string }{
			{"/api/users?x=1", "/users?x=1"},
			{"/api", "/"},
			{"/api/", "/"},
			{"/api/a%2fb/./c", "/a%2Fb/c"},
			{"/v1/a", "/internal/v1/a"},
			{"/v1/", "/internal/v1/"},
			{"/plain/x", "/plain/x"},
		}
		for _, c := range cases {
			resp, err := h.client.Get(h.base + c.path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Target") != c.want {
				t.Errorf("%s: %d, backend got %q, want %q", c.path, resp.StatusCode, resp.Header.Get("X-Target"), c.want)
			}
		}
		resp, err := h.client.Get(h.base + "/apix")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("/apix: %d", resp.StatusCode)
		}
		lines := sink.wait(t, len(cases)+1)
		for i, c := range cases {
			l := lines[i]
			path, _, _ := strings.Cut(c.path, "?")
			fwd, _, _ := strings.Cut(c.want, "?")
			if strings.HasPrefix(c.path, "/plain/") {
				fwd = "<nil>"
			}
			if l["path"] != path || fmtAny(l["upstream_path"]) != fwd {
				t.Errorf("log of %s: path %v, upstream_path %v, want %q and %q", c.path, l["path"], l["upstream_path"], path, fwd)
			}
		}
	})
}

func fmtAny(v any) string {
	if v == nil {
		return "<nil>"
	}
	s, _ := v.(string)
	return s
}

// TestN01EscapedSlashRefused: with the default escaped_slashes
// ("reject"), a rewritten route refuses "%2F" as every route does: the
// rewrite runs on normalised paths only.
func TestN01EscapedSlashRefused(t *testing.T) {
	be := targetEcho(t)
	uc := staticUpstream("web", "/", be)
	uc.Routes = []RouteConfig{{PathPrefix: "/api/", Rewrite: rewrite.Config{StripPrefix: true}}}
	h := newHarnessOver(t, ProtocolH1, uc)
	resp, err := h.client.Get(h.base + "/api/a%2Fb")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("X-Impulse-Error") != "invalid_path" {
		t.Errorf("%d %v", resp.StatusCode, resp.Header)
	}
}

// TestPathMatching: exact path and path_regex routes over every ingress,
// in the documented precedence (exact > path_regex > path_prefix), on
// the normalised path; the access log's route is the matcher as written.
func TestPathMatching(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := targetEcho(t)
		var ups []UpstreamConfig
		for _, rc := range []RouteConfig{{PathPrefix: "/api/"}, {Path: "/api/health"}, {PathRegex: `/api/users/[0-9]+`}} {
			name := "prefix"
			switch {
			case rc.Path != "":
				name = "exact"
			case rc.PathRegex != "":
				name = "regex"
			}
			uc := staticUpstream(name, "/", be)
			uc.Routes = []RouteConfig{rc}
			uc.Routes[0].ResponseHeaders = headers.Config{Set: map[string]string{"X-Route": "{route}", "X-Upstream": name}}
			ups = append(ups, uc)
		}
		h := newHarnessOver(t, proto, ups...)
		for _, c := range []struct{ path, upstream, route string }{
			{"/api/health", "exact", "/api/health"},
			{"/api/./health", "exact", "/api/health"},
			{"/api/health/", "prefix", "/api/"},
			{"/api/users/42", "regex", "/api/users/[0-9]+"},
			{"/api/users/4%32", "regex", "/api/users/[0-9]+"}, // "%32" is "2", unreserved: decoded by normalisation
			{"/api/users/42/x", "prefix", "/api/"},
		} {
			resp, err := h.client.Get(h.base + c.path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != c.upstream || resp.Header.Get("X-Route") != c.route {
				t.Errorf("%s: %d, upstream %q route %q, want %q %q", c.path, resp.StatusCode, resp.Header.Get("X-Upstream"), resp.Header.Get("X-Route"), c.upstream, c.route)
			}
		}
	})
}

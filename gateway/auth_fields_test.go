package gateway

import (
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/auth"
	"github.com/impulse-agent/impulse-agent/internal/credfile"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// sameField reports whether the field names a and b are one variable for
// a CGI-style backend (HTTP_X_USER): equal but for case and "_" for "-".
func sameField(a, b string) bool {
	return strings.EqualFold(strings.ReplaceAll(a, "_", "-"), strings.ReplaceAll(b, "_", "-"))
}

// TestA07CredentialSpellings: over h1, h2 and h3 a key with optional
// whitespace around it is the key (RFC 9110 §5.5; Go's HTTP/1.1 server
// trims it, the HTTP/2 and HTTP/3 servers do not), as is a Basic value;
// and after a success the backend gets neither the credential field nor
// a client's underscore spelling of it (X_Api_Key), which CGI, WSGI and
// PHP would read as the same variable.
func TestA07CredentialSpellings(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		backend := &headerLog{}
		uc := staticUpstream("api", "/keys/", testbackend.NewH1(t, http.HandlerFunc(backend.handler)))
		uc.Routes = []RouteConfig{
			{PathPrefix: "/keys/", Auth: auth.Config{APIKeys: &auth.APIKeysConfig{Header: "X-Api-Key",
				Keys: []credfile.Key{{Name: "ci", Digest: sha256.Sum256([]byte(a07Key))}}}}},
			{PathPrefix: "/basic/", Auth: auth.Config{Basic: &auth.BasicConfig{Realm: "r",
				Users: []credfile.User{{Name: a07User, Hash: a07Hash}}}}},
		}
		h := startHarness(t, ListenerConfig{}, proto, uc)
		basic := basicOf(a07User, a07Password)["Authorization"][0]
		for _, c := range []struct {
			path string
			hdr  http.Header
		}{
			{"/keys/ows", http.Header{"X-Api-Key": {"  " + a07Key + " \t"}}},
			{"/keys/variants", http.Header{"X-Api-Key": {a07Key}, "X_Api_Key": {"forged"}, "x_api_key": {"forged"}, "X-API_KEY": {"forged"}}},
			{"/basic/ows", http.Header{"Authorization": {" " + basic + "  "}}},
		} {
			if status, reason, err := h.do("GET", c.path, nil, 0, c.hdr); err != nil || status != 200 {
				t.Errorf("%s: %d %s %v, want 200", c.path, status, reason, err)
			}
		}
		seen := backend.all()
		if len(seen) != 3 {
			t.Fatalf("the backend got %d requests, want 3", len(seen))
		}
		for _, hdr := range seen {
			for k := range hdr {
				if sameField(k, "X-Api-Key") || sameField(k, "Authorization") {
					t.Errorf("%s reached the backend: %v", k, hdr)
				}
			}
		}
	})
}

// faService is the auth service of TestA06ForwardAuthFields: it allows
// /fa/public/* (with X-User: bob), allows /fa/hop/* with X-User named in
// Connection, refuses /fa/bare/* with a 401 without Content-Type,
// /fa/forbid/* with a 403, anything else with a 401; it records the
// X-Forwarded-Uri values it got.
type faService struct {
	mu   sync.Mutex
	uris []string
}

func (s *faService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	uri := r.Header.Get("X-Forwarded-Uri")
	s.mu.Lock()
	s.uris = append(s.uris, uri)
	s.mu.Unlock()
	switch {
	case strings.HasPrefix(uri, "/fa/public/"):
		w.Header().Set("X-User", "bob")
	case strings.HasPrefix(uri, "/fa/hop/"):
		w.Header().Set("X-User", "hop")
		w.Header().Set("Connection", "X-User")
	case strings.HasPrefix(uri, "/fa/bare/"):
		w.Header()["Content-Type"] = nil // as sent: no type
		w.WriteHeader(401)
		io.WriteString(w, "<b>no</b>")
	case strings.HasPrefix(uri, "/fa/forbid/"):
		w.WriteHeader(403)
	default:
		w.WriteHeader(401)
	}
}

// TestA06ForwardAuthFields: over h1, h2 and h3, forward auth describes
// the normalized path the backend gets (/fa/public/../secret is asked as
// /fa/secret, and refused); a client's X-User in any spelling never
// reaches the backend; an X-User the service names in Connection is
// hop-by-hop and not copied; a refusal without Content-Type is relayed
// without one; a gRPC call refused gets UNAUTHENTICATED (401) or
// PERMISSION_DENIED (403) as a gRPC status.
func TestA06ForwardAuthFields(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		svc := &faService{}
		as := httptest.NewServer(svc)
		t.Cleanup(as.Close)
		backend := &headerLog{}
		uc := staticUpstream("api", "/fa/", testbackend.NewH1(t, http.HandlerFunc(backend.handler)))
		uc.Routes = []RouteConfig{{PathPrefix: "/fa/", Auth: auth.Config{Forward: &auth.ForwardConfig{Address: as.URL,
			CopyResponseHeaders: []string{"X-User"}, Timeout: 5 * time.Second}}}}
		h := startHarness(t, ListenerConfig{}, proto, uc)
		do := func(path string, hdr http.Header) *http.Response {
			t.Helper()
			req, _ := http.NewRequest("GET", h.base+path, nil)
			for k, v := range hdr {
				req.Header[k] = v
			}
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Header["X-Test-Body"] = []string{string(b)}
			return resp
		}

		if resp := do("/fa/public/../secret?q=1", nil); resp.StatusCode != 401 {
			t.Errorf("/fa/public/../secret: %d, want the service's 401 for /fa/secret", resp.StatusCode)
		}
		forged := http.Header{"X-User": {"forged"}, "X_User": {"forged"}, "x_user": {"forged"}, "X-USER": {"forged"}}
		if resp := do("/fa/public/a", forged); resp.StatusCode != 200 {
			t.Errorf("/fa/public/a: %d", resp.StatusCode)
		}
		if resp := do("/fa/hop/a", forged); resp.StatusCode != 200 {
			t.Errorf("/fa/hop/a: %d", resp.StatusCode)
		}
		seen := backend.all()
		if len(seen) != 2 {
			t.Fatalf("the backend got %d requests, want 2", len(seen))
		}
		for i, want := range []string{"bob", ""} {
			var got []string
			for k, v := range seen[i] {
				if sameField(k, "X-User") {
					got = append(got, k+"="+strings.Join(v, ","))
				}
			}
			if want == "" && len(got) != 0 || want != "" && (len(got) != 1 || got[0] != "X-User="+want) {
				t.Errorf("request %d: the backend got %v, want only the service's X-User %q", i, got, want)
			}
		}
		svc.mu.Lock()
		uris := append([]string(nil), svc.uris...)
		svc.mu.Unlock()
		if len(uris) != 3 || uris[0] != "/fa/secret?q=1" {
			t.Errorf("X-Forwarded-Uri values %q, want the normalized /fa/secret?q=1 first", uris)
		}

		resp := do("/fa/bare/x", nil)
		if resp.StatusCode != 401 || resp.Header.Get("X-Test-Body") != "<b>no</b>" {
			t.Errorf("bare refusal: %d %q", resp.StatusCode, resp.Header.Get("X-Test-Body"))
		}
		if ct, ok := resp.Header["Content-Type"]; ok {
			t.Errorf("a refusal without Content-Type got %q", ct)
		}
		for path, want := range map[string]string{"/fa/deny/x": "16", "/fa/forbid/x": "7"} {
			resp := do(path, http.Header{"Content-Type": {"application/grpc"}, "Te": {"trailers"}})
			if resp.StatusCode != 200 || resp.Header.Get("Grpc-Status") != want || resp.Header.Get("Content-Type") != "application/grpc" {
				t.Errorf("gRPC %s: %d grpc-status %q content-type %q, want 200 grpc-status %s", path, resp.StatusCode, resp.Header.Get("Grpc-Status"), resp.Header.Get("Content-Type"), want)
			}
		}
	})
}

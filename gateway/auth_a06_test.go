package gateway

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/auth"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// authService is the A06 auth service: a real HTTP server that decides by
// the path of X-Forwarded-Uri: /allow/ lets in with X-User (and a field
// not to copy), /anon/ lets in without X-User, /deny/ refuses with 401
// and a body, /login/ redirects with 302, /hang/ never answers, /huge/
// refuses with a body over auth.MaxDenialBytes. It records what it got.
type authService struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []*http.Request
	hung chan struct{} // closed once by the test's end
}

func newAuthService(t *testing.T) *authService {
	a := &authService{hung: make(chan struct{})}
	a.srv = httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(func() {
		close(a.hung)
		a.srv.Close()
	})
	return a
}

func (a *authService) serve(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.got = append(a.got, r.Clone(r.Context()))
	a.mu.Unlock()
	uri := r.Header.Get("X-Forwarded-Uri")
	switch {
	case strings.HasPrefix(uri, "/allow/"):
		w.Header().Set("X-User", "bob")
		w.Header().Set("X-Not-Copied", "1")
		w.WriteHeader(200)
	case strings.HasPrefix(uri, "/anon/"):
		w.WriteHeader(204)
	case strings.HasPrefix(uri, "/deny/"):
		w.Header().Set("Www-Authenticate", `Bearer realm="test"`)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(401)
		io.WriteString(w, "denied by the auth service")
	case strings.HasPrefix(uri, "/login/"):
		w.Header().Set("Location", "https://login.example/?rd="+uri)
		w.WriteHeader(302)
	case strings.HasPrefix(uri, "/huge/"):
		w.WriteHeader(403)
		w.Write(make([]byte, auth.MaxDenialBytes+1))
	case strings.HasPrefix(uri, "/hang/"):
		select {
		case <-r.Context().Done():
		case <-a.hung:
		}
	}
}

func (a *authService) requests() []*http.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*http.Request(nil), a.got...)
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestA06ForwardAuth: case A06 over every ingress. The auth service gets
// the request's method, URI, host, scheme and the copied fields (a GET
// without body); its 2xx lets the request reach the backend with X-User
// (a client's own X-User never does), its 401 (with body) and 302 (with
// Location) reach the client as sent, a hang is 503 auth_unavailable after
// the timeout, as is an unreachable service or an oversized refusal; the
// backend never sees a refused request. A reload that changes the block
// closes the old transport (goleak, TestMain).
func TestA06ForwardAuth(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		as := newAuthService(t)
		backend := &headerLog{}
		fwd := &auth.ForwardConfig{Address: as.srv.URL + "/check?x=1", CopyRequestHeaders: []string{"Authorization", "Cookie"},
			CopyResponseHeaders: []string{"X-User"}, Timeout: 300 * time.Millisecond}
		uc := staticUpstream("api", "/", testbackend.NewH1(t, http.HandlerFunc(backend.handler)))
		uc.Routes = []RouteConfig{
			{PathPrefix: "/", Auth: auth.Config{Forward: fwd}},
			{PathPrefix: "/down/", Auth: auth.Config{Forward: &auth.ForwardConfig{Address: "http://" + closedAddr(t), Timeout: time.Second}}},
		}
		m, msink := inmemMetrics()
		h, logs := loggedHarness(t, proto, accesslog.Config{}, m, uc)
		c := *h.client
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

		do := func(method, path string, hdr http.Header) (*http.Response, string) {
			t.Helper()
			req, _ := http.NewRequest(method, h.base+path, nil)
			for k, v := range hdr {
				req.Header[k] = v
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp, string(b)
		}

		// Allowed: X-User from the auth service, never the client's.
		resp, body := do("POST", "/allow/x?q=1", http.Header{"Authorization": {"Bearer t"}, "Cookie": {"s=1"}, "X-User": {"forged"}, "X-Other": {"o"}})
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("allowed: %d %q", resp.StatusCode, body)
		}
		resp, _ = do("GET", "/anon/x", http.Header{"X-User": {"forged"}})
		if resp.StatusCode != 200 {
			t.Fatalf("allowed without X-User: %d", resp.StatusCode)
		}
		seen := backend.all()
		if len(seen) != 2 {
			t.Fatalf("the backend got %d requests, want 2", len(seen))
		}
		if got := seen[0]["X-User"]; len(got) != 1 || got[0] != "bob" {
			t.Errorf("backend X-User = %q, want [bob]", got)
		}
		if seen[0].Get("X-Not-Copied") != "" {
			t.Error("a field not in copy_response_headers reached the backend")
		}
		if seen[0].Get("Authorization") != "Bearer t" {
			t.Error("forward auth must leave the request's Authorization to the backend")
		}
		if got := seen[1]["X-User"]; len(got) != 0 {
			t.Errorf("the client's own X-User reached the backend: %q", got)
		}
		ar := as.requests()
		if len(ar) != 2 {
			t.Fatalf("the auth service got %d requests, want 2", len(ar))
		}
		first := ar[0]
		wantScheme := "https"
		for k, want := range map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/allow/x?q=1",
			"X-Forwarded-Proto": wantScheme, "X-Forwarded-Host": strings.TrimPrefix(h.base, "https://"),
			"X-Forwarded-For": "127.0.0.1", "Authorization": "Bearer t", "Cookie": "s=1"} {
			if got := first.Header.Get(k); got != want {
				t.Errorf("auth service: %s = %q, want %q", k, got, want)
			}
		}
		if first.Method != "GET" || first.ContentLength > 0 || first.URL.RequestURI() != "/check?x=1" {
			t.Errorf("auth request: %s %s (length %d), want GET /check?x=1 without body", first.Method, first.URL.RequestURI(), first.ContentLength)
		}
		if first.Header.Get("X-Other") != "" || first.Header.Get("X-User") != "" {
			t.Error("a field not in copy_request_headers reached the auth service")
		}

		// Refusals: as the auth service sent them.
		resp, body = do("GET", "/deny/x", nil)
		if resp.StatusCode != 401 || body != "denied by the auth service" || resp.Header.Get("Www-Authenticate") != `Bearer realm="test"` {
			t.Errorf("denied: %d %q %v", resp.StatusCode, body, resp.Header)
		}
		if resp.Header.Get("X-Impulse-Error") != "" {
			t.Error("a relayed refusal carries x-impulse-error")
		}
		resp, _ = do("GET", "/login/x", nil)
		if resp.StatusCode != 302 || resp.Header.Get("Location") != "https://login.example/?rd=/login/x" {
			t.Errorf("redirect: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
		}
		for _, path := range []string{"/hang/x", "/huge/x", "/down/x"} {
			resp, _ = do("GET", path, nil)
			if resp.StatusCode != 503 || resp.Header.Get("X-Impulse-Error") != "auth_unavailable" {
				t.Errorf("%s: %d %q, want 503 auth_unavailable", path, resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
			}
		}
		if n := len(backend.all()); n != 2 {
			t.Errorf("the backend got %d requests, want only the 2 allowed", n)
		}

		lines := logs.wait(t, 7)
		for i, want := range []string{"forward:ok", "forward:ok", "forward:denied", "forward:denied", "forward:unavailable", "forward:unavailable", "forward:unavailable"} {
			checkFields(t, lines[i], map[string]any{"auth": want})
		}
		for res, n := range map[string]float64{"ok": 2, "denied": 2, "unavailable": 3} {
			if got := counterSum(h.gw, msink, "impulse.auth", map[string]string{"method": "forward", "result": res}); got != n {
				t.Errorf("impulse_auth{method=forward,result=%s} = %v, want %v", res, got, n)
			}
		}

		// A reload with another timeout: a new transport; the old one is
		// closed (goleak checks its connections' goroutines are gone).
		fwd2 := *fwd
		fwd2.Timeout = time.Second
		uc.Routes = []RouteConfig{{PathPrefix: "/", Auth: auth.Config{Forward: &fwd2}}}
		if err := h.applyKeepingListener(Config{Upstreams: []UpstreamConfig{uc}, AccessLog: &accesslog.Config{Writer: logs}, Metrics: m}); err != nil {
			t.Fatal(err)
		}
		if resp, _ = do("GET", "/allow/y", nil); resp.StatusCode != 200 {
			t.Errorf("after the reload: %d", resp.StatusCode)
		}
	})
}

package gateway

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/auth"
	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/internal/credfile"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// The A07 secrets: a test fails when any of them shows up where it must
// not.
const (
	a07Key      = "k-A07-0123456789abcdef-secret"
	a07User     = "alice"
	a07Password = "pw-A07-correct-horse"
)

// headerLog is a backend that records the request fields it got.
type headerLog struct {
	mu   sync.Mutex
	seen []http.Header
}

func (l *headerLog) handler(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.seen = append(l.seen, r.Header.Clone())
	l.mu.Unlock()
	io.WriteString(w, "ok")
}

func (l *headerLog) all() []http.Header {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]http.Header(nil), l.seen...)
}

// a07Hash is the bcrypt hash of a07Password (the minimum cost: tests).
var a07Hash = func() []byte {
	h, err := bcrypt.GenerateFromPassword([]byte(a07Password), bcrypt.MinCost)
	if err != nil {
		panic(err)
	}
	return h
}()

// a07Upstream routes /keys/ behind api_keys and /basic/ behind basic_auth
// to backend.
func a07Upstream(t *testing.T, backend *headerLog) UpstreamConfig {
	uc := staticUpstream("api", "/keys/", testbackend.NewH1(t, http.HandlerFunc(backend.handler)))
	uc.Routes = []RouteConfig{
		{PathPrefix: "/keys/", Auth: auth.Config{APIKeys: &auth.APIKeysConfig{Header: "X-Api-Key",
			Keys: []credfile.Key{{Name: "ci", Digest: sha256.Sum256([]byte(a07Key))}}}}},
		{PathPrefix: "/basic/", Auth: auth.Config{Basic: &auth.BasicConfig{Realm: "impulse-agent",
			Users: []credfile.User{{Name: a07User, Hash: a07Hash}}}}},
	}
	return uc
}

// TestA07APIKeysAndBasicAuth: case A07 over every ingress. Missing
// credentials get 401 auth_required, wrong ones 401 auth_invalid (basic:
// with WWW-Authenticate), right ones reach the backend without the
// credential field; the access log says auth and auth_subject, the metric
// counts each decision, and no key, password or hash is in the log.
func TestA07APIKeysAndBasicAuth(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		backend := &headerLog{}
		m, msink := inmemMetrics()
		h, logs := loggedHarness(t, proto, accesslog.Config{}, m, a07Upstream(t, backend))
		basicOf := func(user, pw string) http.Header {
			r, _ := http.NewRequest("GET", "/", nil)
			r.SetBasicAuth(user, pw)
			return http.Header{"Authorization": r.Header["Authorization"]}
		}
		cases := []struct {
			name, path string
			hdr        http.Header
			status     int
			reason     string
			challenge  bool
			auth       string
		}{
			{"no key", "/keys/a", nil, 401, "auth_required", false, "api_key:missing"},
			{"empty key", "/keys/a", http.Header{"X-Api-Key": {""}}, 401, "auth_required", false, "api_key:missing"},
			{"wrong last byte", "/keys/a", http.Header{"X-Api-Key": {a07Key[:len(a07Key)-1] + "X"}}, 401, "auth_invalid", false, "api_key:denied"},
			{"short key", "/keys/a", http.Header{"X-Api-Key": {"k"}}, 401, "auth_invalid", false, "api_key:denied"},
			{"long key", "/keys/a", http.Header{"X-Api-Key": {a07Key + strings.Repeat("x", 4000)}}, 401, "auth_invalid", false, "api_key:denied"},
			{"two keys", "/keys/a", http.Header{"X-Api-Key": {a07Key, a07Key}}, 401, "auth_invalid", false, "api_key:denied"},
			{"key in Authorization", "/keys/a", http.Header{"Authorization": {"Bearer " + a07Key}}, 401, "auth_required", false, "api_key:missing"},
			{"right key", "/keys/a", http.Header{"X-Api-Key": {a07Key}}, 200, "", false, "api_key:ok"},
			{"no credentials", "/basic/a", nil, 401, "auth_required", true, "basic:missing"},
			{"wrong password", "/basic/a", basicOf(a07User, a07Password+"x"), 401, "auth_invalid", true, "basic:denied"},
			{"unknown user", "/basic/a", basicOf("mallory", a07Password), 401, "auth_invalid", true, "basic:denied"},
			{"bearer scheme", "/basic/a", http.Header{"Authorization": {"Bearer " + a07Password}}, 401, "auth_invalid", true, "basic:denied"},
			{"bad base64", "/basic/a", http.Header{"Authorization": {"Basic !!!"}}, 401, "auth_invalid", true, "basic:denied"},
			{"right password", "/basic/a", basicOf(a07User, a07Password), 200, "", false, "basic:ok"},
			{"right password, cached", "/basic/a", basicOf(a07User, a07Password), 200, "", false, "basic:ok"},
			{"lower-case scheme", "/basic/a", http.Header{"Authorization": {"basic " + strings.TrimPrefix(basicOf(a07User, a07Password)["Authorization"][0], "Basic ")}}, 200, "", false, "basic:ok"},
		}
		oks := 0
		for _, c := range cases {
			status, body, err := h.do("GET", c.path, nil, 0, c.hdr)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if status != c.status {
				t.Errorf("%s: status %d, want %d (%s)", c.name, status, c.status, body)
			}
			if c.status == 200 {
				oks++
			} else if !strings.Contains(body, c.reason) {
				t.Errorf("%s: body %q, want reason %s", c.name, body, c.reason)
			}
		}
		// The answers' fields, once each kind.
		resp := h.get("/basic/x")
		resp.Body.Close()
		if got := resp.Header.Get("Www-Authenticate"); got != `Basic realm="impulse-agent", charset="UTF-8"` {
			t.Errorf("basic 401: WWW-Authenticate %q", got)
		}
		if got := resp.Header.Get("X-Impulse-Error"); got != "auth_required" {
			t.Errorf("basic 401: x-impulse-error %q", got)
		}
		resp = h.get("/keys/x")
		resp.Body.Close()
		if resp.StatusCode != 401 || resp.Header.Get("Www-Authenticate") != "" || resp.Header.Get("X-Impulse-Error") != "auth_required" {
			t.Errorf("api key 401: %d, WWW-Authenticate %q, x-impulse-error %q", resp.StatusCode, resp.Header.Get("Www-Authenticate"), resp.Header.Get("X-Impulse-Error"))
		}

		seen := backend.all()
		if len(seen) != oks {
			t.Fatalf("the backend got %d requests, want the %d admitted", len(seen), oks)
		}
		for _, hdr := range seen {
			if hdr.Get("X-Api-Key") != "" || hdr.Get("Authorization") != "" {
				t.Errorf("a credential field reached the backend: %v", hdr)
			}
		}

		lines := logs.wait(t, len(cases)+2)
		for i, c := range cases {
			want := map[string]any{"auth": c.auth, "status": float64(c.status), "reason": c.reason}
			switch c.auth {
			case "api_key:ok":
				want["auth_subject"] = "ci"
			case "basic:ok":
				want["auth_subject"] = a07User
			default:
				want["auth_subject"] = nil
			}
			checkFields(t, lines[i], want)
		}
		for _, pair := range []struct{ method, result string }{{"api_key", "missing"}, {"api_key", "denied"}, {"api_key", "ok"}, {"basic", "missing"}, {"basic", "denied"}, {"basic", "ok"}} {
			if n := counterSum(h.gw, msink, "impulse.auth", map[string]string{"method": pair.method, "result": pair.result}); n == 0 {
				t.Errorf("impulse_auth{method=%s,result=%s} not counted", pair.method, pair.result)
			}
		}
		if n := counterSum(h.gw, msink, "impulse.auth", map[string]string{"route": "/basic/", "method": "basic", "result": "ok"}); n != 3 {
			t.Errorf("impulse_auth{route=/basic/,method=basic,result=ok} = %v, want 3", n)
		}
		checkNoSecret(t, "access log", logs.String())
	})
}

// checkNoSecret fails when text holds one of the A07 secrets: a key, a
// password, a hash or the base64 of user:password.
func checkNoSecret(t *testing.T, where, text string) {
	t.Helper()
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(a07User, a07Password)
	b64 := strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
	for name, s := range map[string]string{"API key": a07Key, "password": a07Password, "bcrypt hash": string(a07Hash), "basic credentials": b64} {
		if strings.Contains(text, s) {
			t.Errorf("the %s is in the %s", name, where)
		}
	}
}

// TestA07NoSecretInTraces: the spans of requests with right and wrong
// credentials (every attribute, event and status) hold no key, password
// or hash, over every ingress.
func TestA07NoSecretInTraces(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		tp, exp := newTestTracing(t)
		backend := &headerLog{}
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{a07Upstream(t, backend)}, TracerProvider: tp}, ListenerConfig{}, proto)
		r, _ := http.NewRequest("GET", "/", nil)
		r.SetBasicAuth(a07User, a07Password)
		wrong, _ := http.NewRequest("GET", "/", nil)
		wrong.SetBasicAuth(a07User, a07Password+"x")
		for _, c := range []struct {
			path string
			hdr  http.Header
		}{
			{"/keys/a", http.Header{"X-Api-Key": {a07Key}}},
			{"/keys/a", http.Header{"X-Api-Key": {a07Key + "x"}}},
			{"/basic/a", r.Header},
			{"/basic/a", wrong.Header},
		} {
			if _, _, err := h.do("GET", c.path, nil, 0, c.hdr); err != nil {
				t.Fatal(err)
			}
		}
		var dump strings.Builder
		eventually(t, 10*time.Second, func() bool { return len(exp.GetSpans()) >= 4 }, "spans")
		for _, s := range exp.GetSpans() {
			fmt.Fprintf(&dump, "%s %v %v %v %v\n", s.Name, s.Attributes, s.Events, s.Status, s.Links)
		}
		checkNoSecret(t, "traces", dump.String())
	})
}

// TestRoutesReportAuth: /v1/routes and /v1/upstreams name each route's
// authentication methods, in the order they run, and whether it has IP
// rules; never a key or a user.
func TestRoutesReportAuth(t *testing.T) {
	uc := a07Upstream(t, &headerLog{})
	uc.Routes[1].Auth.Forward = &auth.ForwardConfig{Address: "http://127.0.0.1:1", Timeout: time.Second}
	uc.Routes[0].IPRules = clientaddr.Rules{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	uc.Routes = append(uc.Routes, RouteConfig{PathPrefix: "/open/"})
	g, _ := benchGateway(t, Config{Upstreams: []UpstreamConfig{uc}})
	want := map[string]string{"/keys/": "[api_key] true", "/basic/": "[basic forward] false", "/open/": "[] false"}
	for _, r := range g.Routes() {
		if got := fmt.Sprint(r.Auth, " ", r.IPRules); got != want[r.PathPrefix] {
			t.Errorf("route %s: %s, want %s", r.PathPrefix, got, want[r.PathPrefix])
		}
	}
	for _, r := range g.Upstreams()[0].Routes {
		if got := fmt.Sprint(r.Auth, " ", r.IPRules); got != want[r.PathPrefix] {
			t.Errorf("upstream route %s: %s, want %s", r.PathPrefix, got, want[r.PathPrefix])
		}
	}
	b, _ := json.Marshal(g.Routes())
	if s := string(b); strings.Contains(s, a07User) || strings.Contains(s, "X-Api-Key") || !strings.Contains(s, `"auth":["basic","forward"]`) {
		t.Errorf("routes JSON %s", s)
	}
}

package gateway

import (
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/auth"
	"github.com/impulse-agent/impulse-agent/internal/jwks"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/impulse-agent/impulse-agent/internal/testjwt"
)

const (
	a05Issuer   = "https://id.a05.example"
	a05Audience = "api"
)

// a05Upstream routes /jwt/ behind a jwt block fetching srv's key set
// (trusting its certificate) at clk, forwarding sub as X-User and, on
// /claims/, also email as X-Email, to backend.
func a05Upstream(t *testing.T, backend *headerLog, srv *testjwt.JWKSServer, clk *testjwt.Clock) UpstreamConfig {
	uc := staticUpstream("api", "/jwt/", testbackend.NewH1(t, http.HandlerFunc(backend.handler)))
	jc := func(claims map[string]string) *auth.JWTConfig {
		return &auth.JWTConfig{Issuer: a05Issuer, Audiences: []string{a05Audience}, JWKSURL: srv.URL(), JWKSRoots: srv.Pool(),
			ForwardClaims: claims, ClockSkew: auth.DefaultClockSkew, Realm: "impulse-agent", Now: clk.Now}
	}
	uc.Routes = []RouteConfig{
		{PathPrefix: "/jwt/", Auth: auth.Config{JWT: jc(map[string]string{"sub": "X-User"})}},
		{PathPrefix: "/claims/", Auth: auth.Config{JWT: jc(map[string]string{"sub": "X-User", "email": "X-Email"})}},
	}
	return uc
}

// a05Answer is what the client got: status, x-impulse-error and
// WWW-Authenticate.
type a05Answer struct {
	status            int
	reason, challenge string
	err               error
}

func a05Do(h *harness, path string, hdr http.Header) a05Answer {
	h.t.Helper()
	req, _ := http.NewRequest("GET", h.base+path, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return a05Answer{err: err}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return a05Answer{resp.StatusCode, resp.Header.Get("X-Impulse-Error"), resp.Header.Get("Www-Authenticate"), nil}
}

func bearerOf(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// TestA05JWT: case A05 over every ingress, against a key set served over
// HTTPS. Valid ES256 and RS256 tokens reach the backend with sub as
// X-User and without Authorization; expired, not yet valid, wrong
// audience or issuer, alg none, HS256 keyed by the public key, an unknown
// kid, malformed and oversized tokens get 401 auth_invalid with an
// invalid_token challenge; no token gets 401 auth_required with a bare
// Bearer challenge; two Authorization fields get 400 auth_malformed with
// an invalid_request challenge (RFC 6750 §3.1); a valid token without a forwarded claim gets 403
// auth_forbidden (insufficient_scope). A client's X-User never reaches
// the backend. The access log says jwt:RESULT with sub as auth_subject,
// impulse_auth counts each, and no token is logged.
func TestA05JWT(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		clk := testjwt.NewClock(time.Now())
		es, rs := testjwt.ES256("es-1"), testjwt.RS256("rs-1")
		srv := testjwt.NewJWKSServer(t, testjwt.JWKS(es, rs))
		backend := &headerLog{}
		m, msink := inmemMetrics()
		h, logs := loggedHarness(t, proto, accesslog.Config{}, m, a05Upstream(t, backend, srv, clk))
		now := clk.Now()
		good := testjwt.Claims(now, a05Issuer, a05Audience, "alice")
		claims := func(kv ...any) map[string]any {
			out := map[string]any{}
			for k, v := range good {
				out[k] = v
			}
			for i := 0; i < len(kv); i += 2 {
				if kv[i+1] == nil {
					delete(out, kv[i].(string))
				} else {
					out[kv[i].(string)] = kv[i+1]
				}
			}
			return out
		}
		valid := es.Sign(good)
		var tokens []string // every token sent: none may be logged
		type tc struct {
			name, path string
			hdr        http.Header
			status     int
			reason     string
			challenge  string // a part of WWW-Authenticate
			auth       string
		}
		invalid := func(name, token, desc string) tc {
			tokens = append(tokens, token)
			return tc{name, "/jwt/a", bearerOf(token), 401, "auth_invalid", `error="invalid_token", error_description="` + desc + `"`, "jwt:denied"}
		}
		cases := []tc{
			{"ES256", "/jwt/a", http.Header{"Authorization": {"Bearer " + valid}, "X-User": {"forged"}, "X_User": {"forged"}}, 200, "", "", "jwt:ok"},
			{"RS256", "/jwt/a", bearerOf(rs.Sign(claims("sub", "bob"))), 200, "", "", "jwt:ok"},
			{"ES256, cached", "/jwt/a", bearerOf(valid), 200, "", "", "jwt:ok"},
			{"no token", "/jwt/a", http.Header{"X-User": {"forged"}}, 401, "auth_required", `Bearer realm="impulse-agent"`, "jwt:missing"},
			{"Basic", "/jwt/a", http.Header{"Authorization": {"Basic YTpi"}}, 401, "auth_required", `Bearer realm="impulse-agent"`, "jwt:missing"},
			invalid("expired", es.Sign(claims("exp", now.Add(-time.Minute).Unix())), "token expired"),
			invalid("not yet valid", es.Sign(claims("nbf", now.Add(time.Minute).Unix())), "token not yet valid"),
			invalid("wrong audience", es.Sign(claims("aud", "other")), "wrong audience"),
			invalid("wrong issuer", es.Sign(claims("iss", "https://evil.example")), "wrong issuer"),
			invalid("no exp", es.Sign(claims("exp", nil)), "token without exp"),
			invalid("alg none", testjwt.Unsigned("es-1", good), "signature algorithm not accepted"),
			invalid("HS256 keyed by the public key", es.HS256WithPublicKey(good), "signature algorithm not accepted"),
			invalid("unknown kid", testjwt.ES256("nobody").Sign(good), "unknown signing key"),
			invalid("malformed", "not-a-token", "malformed token"),
			invalid("malformed, two parts", "a.b", "malformed token"),
			invalid("malformed, bad base64", "@@@.@@@.@@@", "malformed token"),
			invalid("huge", valid+strings.Repeat("A", auth.MaxTokenBytes), "token over 8192 bytes"),
			{"two Authorization fields", "/jwt/a", http.Header{"Authorization": {"Bearer " + valid, "Bearer " + valid}}, 400, "auth_malformed",
				`Bearer realm="impulse-agent", error="invalid_request", error_description="more than one Authorization field"`, "jwt:malformed"},
			{"no sub", "/jwt/a", bearerOf(es.Sign(claims("sub", nil))), 403, "auth_forbidden", `error="insufficient_scope"`, "jwt:forbidden"},
			{"no email", "/claims/a", bearerOf(valid), 403, "auth_forbidden", `error="insufficient_scope", error_description="a required claim is missing"`, "jwt:forbidden"},
			{"email", "/claims/a", bearerOf(es.Sign(claims("email", "alice@example.com"))), 200, "", "", "jwt:ok"},
		}
		tokens = append(tokens, valid, strings.Split(valid, ".")[2])
		oks := 0
		for _, c := range cases {
			got := a05Do(h, c.path, c.hdr)
			if got.err != nil {
				t.Fatalf("%s: %v", c.name, got.err)
			}
			if got.status != c.status || got.reason != c.reason || !strings.Contains(got.challenge, c.challenge) || (c.challenge == "") != (got.challenge == "") {
				t.Errorf("%s: %d %q %q, want %d %q %q", c.name, got.status, got.reason, got.challenge, c.status, c.reason, c.challenge)
			}
			if c.status == 200 {
				oks++
			}
		}

		seen := backend.all()
		if len(seen) != oks {
			t.Fatalf("the backend got %d requests, want the %d admitted", len(seen), oks)
		}
		for i, want := range []string{"alice", "bob", "alice", "alice"} {
			if got := seen[i]["X-User"]; len(got) != 1 || got[0] != want || seen[i]["X_User"] != nil || seen[i]["Authorization"] != nil {
				t.Errorf("backend request %d: X-User %q (want %s), X_User %q, Authorization %q", i, got, want, seen[i]["X_User"], seen[i]["Authorization"])
			}
		}
		if got := seen[3].Get("X-Email"); got != "alice@example.com" {
			t.Errorf("X-Email = %q", got)
		}

		lines := logs.wait(t, len(cases))
		for i, c := range cases {
			want := map[string]any{"auth": c.auth, "status": float64(c.status), "auth_subject": nil}
			if c.status == 200 {
				want["auth_subject"] = map[string]string{"RS256": "bob"}[c.name]
				if want["auth_subject"] == "" {
					want["auth_subject"] = "alice"
				}
			}
			checkFields(t, lines[i], want)
		}
		for res, n := range map[string]float64{"ok": 4, "missing": 2, "denied": 12, "malformed": 1, "forbidden": 2} {
			if got := counterSum(h.gw, msink, "impulse.auth", map[string]string{"method": "jwt", "result": res}); got != n {
				t.Errorf("impulse_auth{method=jwt,result=%s} = %v, want %v", res, got, n)
			}
		}
		if n := srv.Fetches(); n != 1 {
			t.Errorf("the key set was fetched %d times, want once (the unknown kid's refetch is within 10 s of the first)", n)
		}
		text := logs.String()
		for _, tok := range tokens {
			if strings.Contains(text, tok) {
				t.Fatalf("a token is in the access log:\n%s", text)
			}
		}
	})
}

// TestA05JWKSOutageAndRotation: case A05's key set changes over every
// ingress, on a fake clock. A token of a new kid (a rotation) refetches
// the set at once and passes; made-up kids right after cost no fetch.
// Through an outage the last set keeps verifying (200) until it is 24 h
// old, then 503 auth_unavailable; the provider back, tokens pass again. A
// reload with the same jwt block keeps the set (no fetch); one that
// changes it fetches anew.
func TestA05JWKSOutageAndRotation(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		clk := testjwt.NewClock(time.Now())
		k1, k2 := testjwt.ES256("k1"), testjwt.ES256("k2")
		srv := testjwt.NewJWKSServer(t, testjwt.JWKS(k1))
		backend := &headerLog{}
		uc := a05Upstream(t, backend, srv, clk)
		m, msink := inmemMetrics()
		h, logs := loggedHarness(t, proto, accesslog.Config{}, m, uc)
		sign := func(s *testjwt.Signer) http.Header {
			return bearerOf(s.Sign(testjwt.Claims(clk.Now(), a05Issuer, a05Audience, "alice")))
		}
		expect := func(what string, hdr http.Header, status int, reason string) {
			t.Helper()
			got := a05Do(h, "/jwt/x", hdr)
			if got.err != nil || got.status != status || got.reason != reason {
				t.Fatalf("%s: %d %q %v, want %d %q", what, got.status, got.reason, got.err, status, reason)
			}
		}
		fetches := func(what string, n int64) {
			t.Helper()
			eventually(t, 10*time.Second, func() bool { return srv.Fetches() >= n }, what)
			if got := srv.Fetches(); got != n {
				t.Fatalf("%s: %d fetches, want %d", what, got, n)
			}
		}
		expect("k1", sign(k1), 200, "")
		fetches("the first fetch", 1)

		// Rotation.
		srv.Set(testjwt.JWKS(k1, k2))
		clk.Add(auth.JWKSMinFetchInterval)
		expect("k2, new", sign(k2), 200, "")
		fetches("the rotation's refetch", 2)
		for i := range 5 {
			expect("a made-up kid", sign(testjwt.ES256(fmt.Sprint("made-up-", i))), 401, "auth_invalid")
		}
		fetches("made-up kids within 10 s", 2)

		// A reload with the same block keeps the set.
		if err := h.applyKeepingListener(Config{Upstreams: []UpstreamConfig{uc}, AccessLog: &accesslog.Config{Writer: logs}, Metrics: m}); err != nil {
			t.Fatal(err)
		}
		expect("k2 after a reload", sign(k2), 200, "")
		fetches("a reload that changes nothing", 2)

		// The outage.
		srv.SetDown(true)
		clk.Add(auth.JWKSRefresh)
		expect("k2, set due, provider down", sign(k2), 200, "")
		fetches("the refresh during the outage", 3)
		clk.Add(auth.JWKSStaleAfter - auth.JWKSRefresh - time.Second)
		expect("k1, 24 h - 1 s after the last fetch", sign(k1), 200, "")
		fetches("a retry", 4)
		clk.Add(time.Second)
		expect("k1, the set 24 h old", sign(k1), 503, "auth_unavailable")
		clk.Add(auth.JWKSMinFetchInterval)
		expect("k1, the set 24 h old, a failed fetch", sign(k1), 503, "auth_unavailable")
		fetches("the fetch awaited", 5)

		// Recovery.
		srv.SetDown(false)
		clk.Add(auth.JWKSMinFetchInterval)
		expect("k1, the provider back", sign(k1), 200, "")
		fetches("the recovery", 6)
		if n := counterSum(h.gw, msink, "impulse.auth", map[string]string{"method": "jwt", "result": "unavailable"}); n != 2 {
			t.Errorf("impulse_auth{method=jwt,result=unavailable} = %v, want 2", n)
		}

		// A reload that changes the block (another clock skew is another
		// policy, the same set; another CA is another set).
		uc2 := a05Upstream(t, backend, srv, clk)
		other, err := selfsigned.New("other.example")
		if err != nil {
			t.Fatal(err)
		}
		uc2.Routes[0].Auth.JWT.JWKSRoots = other.Pool
		if err := h.applyKeepingListener(Config{Upstreams: []UpstreamConfig{uc2}, AccessLog: &accesslog.Config{Writer: logs}, Metrics: m}); err != nil {
			t.Fatal(err)
		}
		// The new CA does not sign the server: the previous set is carried
		// over, as through an outage, until it is 24 h old.
		expect("k1, a set from a server the new CA does not sign", sign(k1), 200, "")
		clk.Add(auth.JWKSStaleAfter)
		expect("k1, the carried set 24 h old", sign(k1), 503, "auth_unavailable")
	})
}

// TestJWKSReloadCarriesSet: a reload that changes a jwt block's
// jwks_ca_file (or jwks_url) for the same issuer carries the last good
// set to the new source: with a CA that does not sign the server, valid
// tokens still pass (an outage, not 503 at once) and the log says the
// previous set is kept and until when; a new source that works replaces
// it with its first fetch and says so. A new issuer carries nothing. A
// key set server down at startup is logged as "no key set yet", never as
// a last good set kept.
func TestJWKSReloadCarriesSet(t *testing.T) {
	clk := testjwt.NewClock(time.Now())
	k1, k2 := testjwt.ES256("k1"), testjwt.ES256("k2")
	srv := testjwt.NewJWKSServer(t, testjwt.JWKS(k1))
	srv.SetDown(true)
	backend := &headerLog{}
	// one is the /jwt/ route alone, its set from srv trusting roots, for
	// issuer iss.
	one := func(srv *testjwt.JWKSServer, roots *x509.CertPool, iss string) UpstreamConfig {
		uc := a05Upstream(t, backend, srv, clk)
		uc.Routes = uc.Routes[:1]
		uc.Routes[0].Auth.JWT.JWKSRoots, uc.Routes[0].Auth.JWT.Issuer = roots, iss
		return uc
	}
	const iss2 = "https://id2.a05.example"
	logs := &lockedBuffer{}
	cfg := Config{Upstreams: []UpstreamConfig{one(srv, srv.Pool(), a05Issuer)}, Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})}
	h := startHarnessConfig(t, cfg, ListenerConfig{}, ProtocolH2)
	apply := func(uc UpstreamConfig) {
		t.Helper()
		c := cfg
		c.Upstreams = []UpstreamConfig{uc}
		if err := h.applyKeepingListener(c); err != nil {
			t.Fatal(err)
		}
	}
	sign := func(s *testjwt.Signer, iss string) http.Header {
		return bearerOf(s.Sign(testjwt.Claims(clk.Now(), iss, a05Audience, "alice")))
	}
	expect := func(what string, hdr http.Header, status int, reason string) {
		t.Helper()
		got := a05Do(h, "/jwt/x", hdr)
		if got.err != nil || got.status != status || got.reason != reason {
			t.Fatalf("%s: %d %q %v, want %d %q", what, got.status, got.reason, got.err, status, reason)
		}
	}
	logged := func(what, s string) {
		t.Helper()
		eventually(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), s) }, what+": "+s+" in\n"+logs.String())
	}

	expect("the server down at startup", sign(k1, a05Issuer), 503, "auth_unavailable")
	logged("startup", "fetching the key set failed; no key set yet: tokens are refused with 503 auth_unavailable until a fetch succeeds")
	if strings.Contains(logs.String(), "last good set") {
		t.Errorf("a last good set is claimed before any:\n%s", logs)
	}
	if s := h.gw.KeySets(); len(s) != 1 || s[0].Usable || s[0].LastErr == nil || !s[0].StaleAt.IsZero() {
		t.Errorf("key sets at startup, the server down: %+v", s)
	}
	srv.SetDown(false)
	clk.Add(auth.JWKSMinFetchInterval)
	expect("the server back", sign(k1, a05Issuer), 200, "")
	fetchedAt := clk.Now()

	// jwks_ca_file changed to a CA that does not sign the server.
	wrong, err := selfsigned.New("other.example")
	if err != nil {
		t.Fatal(err)
	}
	wrong2, err := selfsigned.New("other2.example")
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Hour)
	apply(one(srv, wrong.Pool, a05Issuer))
	expect("a wrong CA: the previous set verifies", sign(k1, a05Issuer), 200, "")
	logged("the reload", "the key set's source changed; the previous source's last good set verifies until the new one is fetched")
	logged("the new source's failure", "fetching the key set from the new source failed; the previous source's last good set is kept until a fetch succeeds")
	logged("the stale time", "stale_at="+fetchedAt.Add(auth.JWKSStaleAfter).UTC().Format(time.RFC3339))
	if s := h.gw.KeySets(); len(s) != 1 || !s[0].Usable || !s[0].Carried || !s[0].FetchedAt.Equal(fetchedAt) || s[0].LastErr == nil {
		t.Errorf("key sets with the set carried: %+v", s)
	}

	// A new issuer's block carries nothing: the old set is not its
	// provider's.
	apply(one(srv, wrong2.Pool, iss2))
	expect("a new issuer, a wrong CA", sign(k1, iss2), 503, "auth_unavailable")
	// The old issuer back, still a wrong CA: the set was retired with the
	// reload before, nothing is left to carry.
	apply(one(srv, wrong.Pool, a05Issuer))
	expect("nothing left to carry", sign(k1, a05Issuer), 503, "auth_unavailable")

	// The right CA again, then a new jwks_url, down at first: the set is
	// carried, and the new source's first fetch replaces it (k2, which only
	// it has, passes).
	apply(one(srv, srv.Pool(), a05Issuer))
	expect("the right CA again", sign(k1, a05Issuer), 200, "")
	srv2 := testjwt.NewJWKSServer(t, testjwt.JWKS(k1, k2))
	srv2.SetDown(true)
	apply(one(srv2, srv2.Pool(), a05Issuer))
	expect("a new jwks_url, down: the previous set", sign(k1, a05Issuer), 200, "")
	srv2.SetDown(false)
	clk.Add(auth.JWKSMinFetchInterval)
	expect("a new jwks_url, up: its set", sign(k2, a05Issuer), 200, "")
	logged("the new source's success", "key set fetched from the new source; it replaces the set carried over the reload")
}

// String is what was written so far.
func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestA05NoTokenInTraces: the spans of requests with valid and refused
// bearer tokens (every attribute, event and status) hold no token, over
// every ingress.
func TestA05NoTokenInTraces(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		clk := testjwt.NewClock(time.Now())
		es := testjwt.ES256("es-1")
		srv := testjwt.NewJWKSServer(t, testjwt.JWKS(es))
		tp, exp := newTestTracing(t)
		h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{a05Upstream(t, &headerLog{}, srv, clk)}, TracerProvider: tp}, ListenerConfig{}, proto)
		good := testjwt.Claims(clk.Now(), a05Issuer, a05Audience, "alice")
		tokens := []string{es.Sign(good), testjwt.ES256("other").Sign(good), es.HS256WithPublicKey(good)}
		for i, tok := range tokens {
			if got := a05Do(h, "/jwt/a", bearerOf(tok)); got.status != map[bool]int{true: 200, false: 401}[i == 0] {
				t.Fatalf("token %d: %d %v", i, got.status, got.err)
			}
		}
		var dump strings.Builder
		eventually(t, 10*time.Second, func() bool { return len(exp.GetSpans()) >= len(tokens) }, "spans")
		for _, s := range exp.GetSpans() {
			fmt.Fprintf(&dump, "%s %v %v %v %v\n", s.Name, s.Attributes, s.Events, s.Status, s.Links)
		}
		for _, tok := range tokens {
			if strings.Contains(dump.String(), tok[strings.LastIndex(tok, ".")+1:]) {
				t.Errorf("a token is in the traces:\n%s", dump.String())
			}
		}
	})
}

// BenchmarkHandlerJWT is BenchmarkHandler on a route with a jwt block (a
// jwks_file set, sub forwarded as X-User) and a token seen before: what
// authentication adds to a request once its token is verified.
func BenchmarkHandlerJWT(b *testing.B) {
	es := testjwt.ES256("k")
	set, err := jwks.Parse(testjwt.JWKS(es), jwks.DefaultAlgorithms)
	if err != nil {
		b.Fatal(err)
	}
	uc := memUpstream(2)
	uc.Routes[0].Auth = auth.Config{JWT: &auth.JWTConfig{Issuer: a05Issuer, Audiences: []string{a05Audience}, Keys: set,
		ForwardClaims: map[string]string{"sub": "X-User"}, ClockSkew: auth.DefaultClockSkew, Realm: "impulse-agent"}}
	_, h := benchGateway(b, Config{Upstreams: []UpstreamConfig{uc}})
	authz := []string{"Bearer " + es.Sign(testjwt.Claims(time.Now(), a05Issuer, a05Audience, "alice"))}
	b.ReportAllocs()
	for b.Loop() {
		r := benchRequest()
		r.Header["Authorization"] = authz
		r = r.WithContext(b.Context())
		w := &discardWriter{h: http.Header{}}
		h.ServeHTTP(w, r)
	}
}

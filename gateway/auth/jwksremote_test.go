package auth

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
	"github.com/impulse-agent/impulse-agent/internal/testjwt"
)

// remoteJWT is a jwt check over srv's key set, at clk, trusting srv's
// certificate; closed at the end of the test.
func remoteJWT(t *testing.T, clk *testjwt.Clock, srv *testjwt.JWKSServer) (*jwtAuth, *RemoteKeys) {
	t.Helper()
	c := JWTConfig{Issuer: testIssuer, Audiences: []string{testAudience}, JWKSURL: srv.URL(), JWKSRoots: srv.Pool(),
		ClockSkew: DefaultClockSkew, Realm: "r", Now: clk.Now}
	rk, err := NewRemoteKeys(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rk.Close)
	return newJWT(c, rk), rk
}

// waitFetches waits until srv was asked n times and rk's fetch ended.
func waitFetches(t *testing.T, srv *testjwt.JWKSServer, rk *RemoteKeys, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rk.mu.Lock()
		idle := rk.inflight == nil
		rk.mu.Unlock()
		if srv.Fetches() == n && idle {
			return
		}
		if srv.Fetches() > n || time.Now().After(deadline) {
			t.Fatalf("%d fetches (idle %v), want %d", srv.Fetches(), idle, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func checkToken(t *testing.T, a *jwtAuth, token, want, desc string) {
	t.Helper()
	res, _, ch := a.check(context.Background(), bearer(token))
	if res != want || !strings.Contains(ch, desc) {
		t.Errorf("%s (%s), want %s (%s)", res, ch, want, desc)
	}
}

// TestA05RemoteKeys: case A05's key set over HTTPS, on a fake clock. The
// first fetch starts at once; a set is refreshed once due (5 min, or the
// answer's max-age) while it keeps verifying; a new kid (a rotation)
// refetches at once, and again only 10 s later (a storm of made-up kids
// costs one fetch); through an outage the last set verifies for 24 h,
// then tokens get unavailable until the provider is back.
func TestA05RemoteKeys(t *testing.T) {
	clk := testjwt.NewClock(testStart)
	k1, k2, k3 := testjwt.ES256("k1"), testjwt.RS256("k2"), testjwt.ES256("k3")
	srv := testjwt.NewJWKSServer(t, testjwt.JWKS(k1))
	a, rk := remoteJWT(t, clk, srv)
	sign := func(s *testjwt.Signer) string {
		return s.Sign(testjwt.Claims(clk.Now(), testIssuer, testAudience, "alice"))
	}

	checkToken(t, a, sign(k1), ResultOK, "") // waits for the first fetch
	waitFetches(t, srv, rk, 1)
	clk.Add(JWKSRefresh - time.Second)
	checkToken(t, a, sign(k1), ResultOK, "")
	waitFetches(t, srv, rk, 1)

	// Due: the request is served with the set at hand, a refresh starts.
	srv.SetCacheControl("public, max-age=120")
	clk.Add(time.Second)
	checkToken(t, a, sign(k1), ResultOK, "")
	waitFetches(t, srv, rk, 2)
	clk.Add(119 * time.Second)
	checkToken(t, a, sign(k1), ResultOK, "")
	waitFetches(t, srv, rk, 2)
	clk.Add(time.Second)
	checkToken(t, a, sign(k1), ResultOK, "")
	waitFetches(t, srv, rk, 3)
	srv.SetCacheControl("")

	// A rotation: k2 published, a token with its kid refetches at once.
	srv.Set(testjwt.JWKS(k1, k2))
	clk.Add(JWKSMinFetchInterval)
	checkToken(t, a, sign(k2), ResultOK, "")
	waitFetches(t, srv, rk, 4)
	// Made-up kids within 10 s: refused without a fetch; k3, published
	// meanwhile, too, until 10 s have passed.
	srv.Set(testjwt.JWKS(k1, k2, k3))
	for i := range 20 {
		checkToken(t, a, testjwt.ES256("made-up-"+string(rune('a'+i))).Sign(testjwt.Claims(clk.Now(), testIssuer, testAudience, "x")), ResultDenied, "unknown signing key")
	}
	checkToken(t, a, sign(k3), ResultDenied, "unknown signing key")
	waitFetches(t, srv, rk, 4)
	clk.Add(JWKSMinFetchInterval)
	checkToken(t, a, sign(k3), ResultOK, "")
	waitFetches(t, srv, rk, 5)
	// A withdrawn key stops verifying with the next refresh, cached tokens
	// included.
	cachedK1 := sign(k1)
	checkToken(t, a, cachedK1, ResultOK, "")
	srv.Set(testjwt.JWKS(k2, k3))
	clk.Add(JWKSRefresh)
	checkToken(t, a, sign(k2), ResultOK, "")
	waitFetches(t, srv, rk, 6)
	checkToken(t, a, cachedK1, ResultDenied, "unknown signing key")
	waitFetches(t, srv, rk, 6) // within 10 s of the refresh: no refetch for k1

	// The outage: the last set keeps verifying, fetches are retried every
	// 10 s at most, until the set is 24 h old.
	srv.SetDown(true)
	start := clk.Now()
	clk.Add(JWKSRefresh)
	checkToken(t, a, sign(k2), ResultOK, "")
	waitFetches(t, srv, rk, 7)
	checkToken(t, a, sign(k2), ResultOK, "")
	waitFetches(t, srv, rk, 7)
	clk.Add(JWKSStaleAfter - clk.Now().Sub(start) - time.Second)
	checkToken(t, a, sign(k3), ResultOK, "")
	waitFetches(t, srv, rk, 8)
	if rk.lastErr == nil || !strings.Contains(rk.lastErr.Error(), "status 503") {
		t.Errorf("last error %v", rk.lastErr)
	}
	clk.Add(time.Second)
	checkToken(t, a, sign(k3), ResultUnavailable, "") // no fetch may start yet: refused at once
	waitFetches(t, srv, rk, 8)
	clk.Add(JWKSMinFetchInterval)
	checkToken(t, a, sign(k3), ResultUnavailable, "") // waited for a failed fetch
	waitFetches(t, srv, rk, 9)

	// Recovery.
	srv.SetDown(false)
	clk.Add(JWKSMinFetchInterval)
	checkToken(t, a, sign(k3), ResultOK, "")
	waitFetches(t, srv, rk, 10)

	rk.Close()
	checkToken(t, a, sign(k3), ResultUnavailable, "")
	if srv.Fetches() != 10 {
		t.Errorf("a closed set fetched: %d", srv.Fetches())
	}
}

// TestRemoteKeysRefusals: a server whose certificate the roots do not
// hold, a set with no usable key and a client that leaves while waiting.
func TestRemoteKeysRefusals(t *testing.T) {
	clk := testjwt.NewClock(testStart)
	k := testjwt.ES256("k")
	srv := testjwt.NewJWKSServer(t, testjwt.JWKS(k))
	c := JWTConfig{Issuer: testIssuer, Audiences: []string{testAudience}, JWKSURL: srv.URL(), Realm: "r", Now: clk.Now}
	errs := make(chan error, 10)
	rk, err := NewRemoteKeys(c, func(f FetchReport) { errs <- f.Err })
	if err != nil {
		t.Fatal(err)
	}
	defer rk.Close()
	a := newJWT(c, rk)
	checkToken(t, a, k.Sign(testjwt.Claims(clk.Now(), testIssuer, testAudience, "a")), ResultUnavailable, "")
	if err := <-errs; err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted certificate: %v", err)
	}

	srv2 := testjwt.NewJWKSServer(t, []byte(`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}`))
	a2, rk2 := remoteJWT(t, clk, srv2)
	checkToken(t, a2, k.Sign(testjwt.Claims(clk.Now(), testIssuer, testAudience, "a")), ResultUnavailable, "")
	if rk2.lastErr == nil || !strings.Contains(rk2.lastErr.Error(), "no key usable") {
		t.Errorf("no usable key: %v", rk2.lastErr)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rk2.mu.Lock()
	rk2.inflight = make(chan struct{}) // a fetch that never ends
	rk2.mu.Unlock()
	res, _, _ := a2.check(ctx, bearer(k.Sign(testjwt.Claims(clk.Now(), testIssuer, testAudience, "a"))))
	rk2.mu.Lock()
	rk2.inflight = nil
	rk2.mu.Unlock()
	if res != ResultCanceled {
		t.Errorf("client gone while waiting: %s", res)
	}

	for _, bad := range []string{"http://127.0.0.1/jwks", "https://", "https://u:p@h/", "https://h/#f", "ftp://h/", "::"} {
		if CheckJWKSURL(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestRefreshAfter: Cache-Control max-age within [1m, 1h]; no-cache and
// no-store are the minimum; nothing usable is the default.
func TestRefreshAfter(t *testing.T) {
	for _, tc := range []struct {
		cc   []string
		want time.Duration
	}{
		{nil, JWKSRefresh},
		{[]string{"public"}, JWKSRefresh},
		{[]string{"max-age=600"}, 10 * time.Minute},
		{[]string{"public, Max-Age=\"900\", must-revalidate"}, 15 * time.Minute},
		{[]string{"max-age=0"}, JWKSMinRefresh},
		{[]string{"max-age=86400"}, JWKSMaxRefresh},
		{[]string{"max-age=99999999999999999999"}, JWKSRefresh},
		{[]string{"max-age=9223372036854775807"}, JWKSMaxRefresh},
		{[]string{"max-age=-5"}, JWKSRefresh},
		{[]string{"public", "no-store"}, JWKSMinRefresh},
		{[]string{"max-age=3000, no-cache"}, JWKSMinRefresh},
	} {
		if got := refreshAfter(tc.cc); got != tc.want {
			t.Errorf("%q: %v, want %v", tc.cc, got, tc.want)
		}
	}
}

// TestRemoteKeysCarry: a RemoteKeys replacing another (a reload that
// changed jwks_url or jwks_ca_file) verifies with the old one's last good
// set until its own first fetch succeeds: through failed fetches (a wrong
// CA) as through an outage, until the set is JWKSStaleAfter old (its
// fetch time kept), and each failure reports the carried set with its
// stale time. The first success replaces it (even with the same
// document) and says so. Nothing is carried from a set already stale, nor
// over a set fetched already, nor without an old set.
func TestRemoteKeysCarry(t *testing.T) {
	clk := testjwt.NewClock(testStart)
	k1, k2 := testjwt.ES256("k1"), testjwt.ES256("k2")
	srv := testjwt.NewJWKSServer(t, testjwt.JWKS(k1))
	_, old := remoteJWT(t, clk, srv)
	waitFetches(t, srv, old, 1)
	fetchedAt := clk.Now()
	clk.Add(time.Hour)

	// The new source: another server, and roots that do not sign it.
	srv2 := testjwt.NewJWKSServer(t, testjwt.JWKS(k1, k2))
	wrong, err := selfsigned.New("other.example")
	if err != nil {
		t.Fatal(err)
	}
	reports := make(chan FetchReport, 10)
	next := func() FetchReport {
		t.Helper()
		select {
		case f := <-reports:
			return f
		case <-time.After(10 * time.Second):
			t.Fatal("no fetch reported")
			return FetchReport{}
		}
	}
	c := JWTConfig{Issuer: testIssuer, Audiences: []string{testAudience}, JWKSURL: srv2.URL(), JWKSRoots: wrong.Pool,
		ClockSkew: DefaultClockSkew, Realm: "r", Now: clk.Now}
	rk, err := newRemoteKeys(c, func(f FetchReport) { reports <- f }, old)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rk.Close)
	a := newJWT(c, rk)
	f := next()
	if f.Err == nil || !strings.Contains(f.Err.Error(), "certificate") || !f.Usable || !f.Carried || !f.StaleAt.Equal(fetchedAt.Add(JWKSStaleAfter)) || f.ReplacedCarried {
		t.Errorf("failed fetch, carried set: %+v", f)
	}
	old.Close() // the reload retires the old source: its set lives on
	sign := func(s *testjwt.Signer) string {
		return s.Sign(testjwt.Claims(clk.Now(), testIssuer, testAudience, "alice"))
	}
	checkToken(t, a, sign(k1), ResultOK, "")
	clk.Add(JWKSMinFetchInterval)
	checkToken(t, a, sign(k2), ResultDenied, "unknown signing key") // the old set's; a refetch fails
	if f := next(); f.Err == nil || !f.Carried || !f.Usable {
		t.Errorf("second failed fetch: %+v", f)
	}
	if s := rk.State(); !s.Usable || !s.Carried || s.URL != srv2.URL() || !s.FetchedAt.Equal(fetchedAt) || s.LastErr == nil {
		t.Errorf("state %+v", s)
	}

	// The stale bound is the old set's: 24 h after its fetch.
	clk.Add(fetchedAt.Add(JWKSStaleAfter - time.Second).Sub(clk.Now()))
	checkToken(t, a, sign(k1), ResultOK, "")
	next()
	clk.Add(time.Second)
	checkToken(t, a, sign(k1), ResultUnavailable, "")
	if s := rk.State(); s.Usable || !s.Carried {
		t.Errorf("stale carried set: %+v", s)
	}

	// The new source fixed (here: its CA trusted after all): the first
	// success replaces the carried set.
	rk2, err := newRemoteKeys(JWTConfig{Issuer: testIssuer, Audiences: []string{testAudience}, JWKSURL: srv2.URL(), JWKSRoots: srv2.Pool(),
		Realm: "r", Now: clk.Now}, func(f FetchReport) { reports <- f }, rk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rk2.Close)
	if f := next(); f.Err != nil || f.Carried || f.ReplacedCarried || !f.Usable {
		t.Errorf("a stale set was carried: %+v", f)
	}

	srv3 := testjwt.NewJWKSServer(t, testjwt.JWKS(k1, k2))
	_, fresh := remoteJWT(t, clk, srv3)
	waitFetches(t, srv3, fresh, 1)
	rk3, err := newRemoteKeys(JWTConfig{Issuer: testIssuer, Audiences: []string{testAudience}, JWKSURL: srv2.URL(), JWKSRoots: srv2.Pool(),
		Realm: "r", Now: clk.Now}, func(f FetchReport) { reports <- f }, fresh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rk3.Close)
	if f := next(); f.Err != nil || f.Carried || !f.ReplacedCarried || !f.Usable || f.FetchedAt != clk.Now() {
		t.Errorf("the new source's first success: %+v", f)
	}
	if rk3.carry(fresh) {
		t.Error("carried over a fetched set")
	}
	if rk3.carry(nil) || rk3.carry(rk3) {
		t.Error("carried nothing")
	}
}

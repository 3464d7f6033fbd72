package auth

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testjwt"
)

// FuzzJWT: any Authorization value through a jwt check over a key set of
// an ES256 and an RS256 key that signed only the seeds. Properties: no
// panic; the result is one of the documented ones (never unavailable nor
// canceled for a jwks_file); a token is let in only when its signed part
// (header and claims, as encoded) is one the keys signed; the same value
// checked again (now from the cache when it passed) gets the same verdict;
// every challenge is an RFC 6750 §3 value (printable ASCII, no
// backslash, quotes only around the parameters); a forwarded value has no
// control character; the client's X-User never survives a refusal.
func FuzzJWT(f *testing.F) {
	clk := testjwt.NewClock(testStart)
	es, rs := testjwt.ES256("es"), testjwt.RS256("rs")
	a := staticJWT(f, clk, map[string]string{"sub": "X-User", "roles": "X-Roles"}, es, rs)
	now := clk.Now()
	good := testjwt.Claims(now, testIssuer, testAudience, "alice")
	good["roles"] = []string{"a", "b"}
	signed := map[string]bool{}
	seed := func(tok string) {
		if i := strings.LastIndexByte(tok, '.'); i > 0 {
			signed[tok[:i]] = true
		}
		f.Add("Bearer " + tok)
	}
	seed(es.Sign(good))
	seed(rs.Sign(good))
	seed(es.Sign(with(good, "sub", "x\ty", "roles", map[string]any{"k": []any{1, "2", nil}})))
	seed(es.Sign(with(good, "exp", now.Add(-time.Hour).Unix())))
	seed(es.Sign(with(good, "roles", nil)))
	seed(es.SignHeader(map[string]any{"kid": "es", "crit": []string{"exp"}, "exp": 1}, good))
	f.Add("Bearer " + testjwt.Unsigned("es", good))
	f.Add("Bearer " + es.HS256WithPublicKey(good))
	f.Add("bearer a.b.c")
	f.Add("Basic YTpi")
	f.Add("Bearer ")
	f.Add("")
	f.Fuzz(func(t *testing.T, v string) {
		check := func() (string, string, string, http.Header) {
			h := http.Header{"Authorization": {v}, "X-User": {"forged"}}
			res, sub, ch := a.check(context.Background(), h)
			return res, sub, ch, h
		}
		res, sub, ch, h := check()
		switch res {
		case ResultOK:
			_, tok, _ := strings.Cut(trimOWS(v), " ")
			tok = strings.TrimLeft(tok, " ")
			i := strings.LastIndexByte(tok, '.')
			if i < 0 || !signed[tok[:i]] {
				t.Fatalf("let in a token the keys never signed: %q", v)
			}
			for _, name := range []string{"X-User", "X-Roles"} {
				if got := h[name]; len(got) != 1 || strings.ContainsFunc(got[0], func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
					t.Fatalf("%s = %q", name, got)
				}
			}
		case ResultMissing, ResultDenied, ResultMalformed, ResultForbidden:
			if h["X-User"] != nil {
				t.Fatalf("%s: the client's X-User survived", res)
			}
		default:
			t.Fatalf("result %q", res)
		}
		if ch != "" && (!strings.HasPrefix(ch, `Bearer realm="r"`) || strings.ContainsFunc(ch, func(r rune) bool { return r < ' ' || r > '~' || r == '\\' })) {
			t.Fatalf("challenge %q", ch)
		}
		if (ch == "") != (res == ResultOK) {
			t.Fatalf("%s with challenge %q", res, ch)
		}
		if res2, sub2, ch2, _ := check(); res2 != res || sub2 != sub || ch2 != ch {
			t.Fatalf("again: %s %q %q, first %s %q %q", res2, sub2, ch2, res, sub, ch)
		}
	})
}

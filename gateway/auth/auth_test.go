package auth

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/internal/credfile"
)

func keysOf(ks ...string) []credfile.Key {
	out := make([]credfile.Key, len(ks))
	for i, k := range ks {
		out[i] = credfile.Key{Name: string(rune('a' + i)), Digest: sha256.Sum256([]byte(k))}
	}
	return out
}

// TestMatchKey: the index of the matching digest, whichever position, -1
// for none; every key is compared (no early exit), so a duplicate digest
// picks the last one.
func TestMatchKey(t *testing.T) {
	keys := keysOf("key-0000000000000000", "key-1111111111111111", "key-2222222222222222")
	for i, k := range []string{"key-0000000000000000", "key-1111111111111111", "key-2222222222222222"} {
		if got := matchKey(keys, sha256.Sum256([]byte(k))); got != i {
			t.Errorf("key %d: matchKey = %d", i, got)
		}
	}
	for _, k := range []string{"", "key-000000000000000", "key-00000000000000000", "KEY-0000000000000000"} {
		if got := matchKey(keys, sha256.Sum256([]byte(k))); got != -1 {
			t.Errorf("%q: matchKey = %d, want -1", k, got)
		}
	}
	if got := matchKey(append(keys, keys[0]), keys[0].Digest); got != 3 {
		t.Errorf("duplicate digest: %d, want the last (3): the loop must not stop at a match", got)
	}
	if got := matchKey(nil, keys[0].Digest); got != -1 {
		t.Errorf("no keys: %d", got)
	}
}

func TestAPIKeysCheck(t *testing.T) {
	a := newAPIKeys(APIKeysConfig{Header: "x-api-key", Keys: keysOf("key-0000000000000000")})
	for _, tc := range []struct {
		h               http.Header
		result, subject string
	}{
		{http.Header{}, ResultMissing, ""},
		{http.Header{"X-Api-Key": {""}}, ResultMissing, ""},
		{http.Header{"X-Api-Key": {"nope"}}, ResultDenied, ""},
		{http.Header{"X-Api-Key": {"key-0000000000000000", "key-0000000000000000"}}, ResultDenied, ""},
		{http.Header{"X-Api-Key": {"key-0000000000000000"}}, ResultOK, "a"},
	} {
		if res, sub := a.check(tc.h); res != tc.result || sub != tc.subject {
			t.Errorf("%v: %s %q, want %s %q", tc.h, res, sub, tc.result, tc.subject)
		}
	}
}

func basicHeader(user, pw string) http.Header {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pw)
	return r.Header
}

// TestBasicCheck: RFC 7617 parsing, bcrypt verification, the cache of
// successes (bounded, expiring, keyed by credentials: a wrong password
// after a right one is still refused), and an empty users list.
func TestBasicCheck(t *testing.T) {
	h, _ := bcrypt.GenerateFromPassword([]byte("pw-alice"), bcrypt.MinCost)
	b := newBasic(BasicConfig{Realm: "r", Users: []credfile.User{{Name: "alice", Hash: h}, {Name: "Jos\u00e9", Hash: h}}})
	if b.challenge != `Basic realm="r", charset="UTF-8"` {
		t.Errorf("challenge %q", b.challenge)
	}
	now := time.Unix(1e9, 0)
	for _, tc := range []struct {
		h               http.Header
		result, subject string
	}{
		{http.Header{}, ResultMissing, ""},
		{http.Header{"Authorization": {"Bearer x"}}, ResultDenied, ""},
		{http.Header{"Authorization": {"Basic"}}, ResultDenied, ""},
		{http.Header{"Authorization": {"Basic bm9jb2xvbg=="}}, ResultDenied, ""}, // "nocolon"
		{basicHeader("alice", "wrong"), ResultDenied, ""},
		{basicHeader("bob", "pw-alice"), ResultDenied, ""},
		{basicHeader("alice", "pw-alice"), ResultOK, "alice"},
		{basicHeader("alice", "pw-alice"), ResultOK, "alice"}, // cached
		// RFC 7617 §2.1: a UTF-8 user-id, compared in NFC whatever form it came in.
		{basicHeader("Jos\u00e9", "pw-alice"), ResultOK, "Jos\u00e9"},
		{basicHeader("Jose\u0301", "pw-alice"), ResultOK, "Jos\u00e9"},
		{basicHeader("al ice", "pw-alice"), ResultDenied, ""},
		{basicHeader("ali\x00ce", "pw-alice"), ResultDenied, ""},
		{basicHeader("\xff", "pw-alice"), ResultDenied, ""},
		{basicHeader("alice", "wrong"), ResultDenied, ""},
		{http.Header{"Authorization": {"BASIC " + strings.TrimPrefix(basicHeader("alice", "pw-alice").Get("Authorization"), "Basic ")}}, ResultOK, "alice"},
	} {
		if res, sub := b.check(context.Background(), tc.h, now); res != tc.result || sub != tc.subject {
			t.Errorf("%v: %s %q, want %s %q", tc.h, res, sub, tc.result, tc.subject)
		}
	}
	key := b.cacheKey("alice", "pw-alice")
	if !b.cached(key, now.Add(VerifiedTTL)) || b.cached(key, now.Add(VerifiedTTL+time.Nanosecond)) {
		t.Error("a verification must be cached for VerifiedTTL, no longer")
	}
	for i := range VerifiedMax + 10 {
		b.remember(b.cacheKey("u", string(rune(i))), "u", now)
	}
	if n := len(b.verified); n > VerifiedMax {
		t.Errorf("cache holds %d entries, more than %d", n, VerifiedMax)
	}

	empty := newBasic(BasicConfig{Realm: "r"})
	if res, _ := empty.check(context.Background(), basicHeader("alice", "pw-alice"), now); res != ResultDenied {
		t.Errorf("empty users: %s", res)
	}
}

// TestForwardSame: a reload keeps a Forward only for the same settings.
func TestForwardSame(t *testing.T) {
	c := ForwardConfig{Address: "http://127.0.0.1:1/a", CopyResponseHeaders: []string{"X-User"}, Timeout: time.Second}
	f, err := NewForward(c)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := c
	d.Timeout = 2 * time.Second
	if !f.Same(c) || f.Same(d) {
		t.Error("Same")
	}
	for _, bad := range []string{"", "ftp://a", "http://", "http://u:p@a", "http://a/#f"} {
		if _, err := NewForward(ForwardConfig{Address: bad, Timeout: time.Second}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := NewForward(ForwardConfig{Address: "http://a", Timeout: 0}); err == nil {
		t.Error("timeout 0 accepted")
	}
}

// BenchmarkAPIKeyProbe is the A07 timing probe: the check of a wrong key
// that shares none, all but the last, or all of its bytes with a
// configured one, of another length, and of the right key. The digests
// are compared in constant time over all keys, so the figures differ only
// by SHA-256 of longer input (a key over 64 bytes hashes another block),
// never by how much of a key matched (README "Edge authentication").
func BenchmarkAPIKeyProbe(b *testing.B) {
	right := "key-0123456789abcdef0123456789ab"
	a := newAPIKeys(APIKeysConfig{Header: "X-Api-Key", Keys: keysOf(strings.Repeat("other-key-", 2), right, "third-key-000000000")})
	for name, k := range map[string]string{
		"right":      right,
		"first-byte": "X" + right[1:],
		"last-byte":  right[:len(right)-1] + "X",
		"short":      "k",
		"same-len":   strings.Repeat("z", len(right)),
	} {
		h := http.Header{"X-Api-Key": {k}}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				a.check(h)
			}
		})
	}
}

// BenchmarkBasicCached is a request with verified basic credentials:
// the cache's HMAC instead of bcrypt.
func BenchmarkBasicCached(b *testing.B) {
	h, _ := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.DefaultCost)
	ba := newBasic(BasicConfig{Realm: "r", Users: []credfile.User{{Name: "alice", Hash: h}}})
	hdr := basicHeader("alice", "pw")
	now := time.Now()
	ba.check(context.Background(), hdr, now)
	for b.Loop() {
		ba.check(context.Background(), hdr, now)
	}
}

// TestAuthMetricHelp: impulse_auth's HELP text names every method and
// every result the label can take (a Prometheus user reads the values
// there).
func TestAuthMetricHelp(t *testing.T) {
	var help string
	for _, d := range observe.CounterDefinitions {
		if strings.Join(d.Name, "_") == "auth" {
			help = d.Help
		}
	}
	if help == "" {
		t.Fatal("no impulse_auth definition")
	}
	for _, v := range []string{MethodAPIKey, MethodBasic, MethodJWT, MethodForward,
		ResultOK, ResultMissing, ResultDenied, ResultMalformed, ResultForbidden, ResultUnavailable, ResultCanceled, ResultBusy} {
		if !strings.Contains(help, " "+v+",") && !strings.Contains(help, "("+v+",") && !strings.Contains(help, " "+v+")") {
			t.Errorf("impulse_auth HELP does not name %q: %s", v, help)
		}
	}
}

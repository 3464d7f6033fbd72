package clientaddr

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func mustPrefixes(t *testing.T, s ...string) Prefixes {
	t.Helper()
	p, err := ParsePrefixes(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParsePrefixes(t *testing.T) {
	for _, bad := range []string{"10.0.0.1", "10.0.0.0/33", "x", "", "::1/129"} {
		if _, err := ParsePrefixes([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	p := mustPrefixes(t, "10.1.2.3/8", "2001:db8::/32")
	if p[0].String() != "10.0.0.0/8" {
		t.Errorf("not masked: %v", p[0])
	}
	for a, want := range map[string]bool{"10.9.9.9": true, "::ffff:10.0.0.1": true, "11.0.0.1": false, "2001:db8::5": true, "2001:db9::": false, "2001:db8::1%eth0": true} {
		if got := p.Contains(netip.MustParseAddr(a)); got != want {
			t.Errorf("Contains(%s) = %v", a, got)
		}
	}
}

func TestRules(t *testing.T) {
	r := Rules{Allow: mustPrefixes(t, "10.0.0.0/8"), Deny: mustPrefixes(t, "10.0.0.2/32")}
	for a, want := range map[string]bool{"10.0.0.1": true, "10.0.0.2": false, "192.0.2.1": false} {
		if got := r.Allows(netip.MustParseAddr(a)); got != want {
			t.Errorf("Allows(%s) = %v", a, got)
		}
	}
	denyOnly := Rules{Deny: mustPrefixes(t, "127.0.0.2/32")}
	if !denyOnly.Allows(netip.MustParseAddr("192.0.2.1")) || denyOnly.Allows(netip.MustParseAddr("127.0.0.2")) {
		t.Error("an empty allow list must allow every address not denied")
	}
	if denyOnly.Allows(netip.Addr{}) || !(Rules{}).Allows(netip.Addr{}) {
		t.Error("no address: allowed by empty rules only")
	}
}

// TestFromHeaders: the right-most untrusted entry (RFC 7239 §5.2; Caddy
// trusted_proxies, Traefik forwardedHeaders).
func TestFromHeaders(t *testing.T) {
	trusted := mustPrefixes(t, "127.0.0.1/32", "10.0.0.0/8")
	for _, tc := range []struct {
		name string
		h    http.Header
		want string // "" for not ok
	}{
		{"A03 chain", http.Header{"X-Forwarded-For": {"6.6.6.6, 10.1.1.1"}}, "6.6.6.6:0"},
		{"right-most untrusted", http.Header{"X-Forwarded-For": {"1.1.1.1, 6.6.6.6, 10.1.1.1"}}, "6.6.6.6:0"},
		{"several lines", http.Header{"X-Forwarded-For": {"1.1.1.1", "6.6.6.6,10.0.0.9"}}, "6.6.6.6:0"},
		{"all trusted", http.Header{"X-Forwarded-For": {"10.0.0.1, 10.0.0.2"}}, "10.0.0.1:0"},
		{"garbage left of trusted", http.Header{"X-Forwarded-For": {"x, 10.0.0.2"}}, "10.0.0.2:0"},
		{"garbage right-most", http.Header{"X-Forwarded-For": {"6.6.6.6, x"}}, ""},
		{"v6", http.Header{"X-Forwarded-For": {"2001:db8::1"}}, "[2001:db8::1]:0"},
		{"forwarded", http.Header{"Forwarded": {`for=6.6.6.6;proto=https, for="[2001:db8::1]:4711", For=10.1.1.1`}}, "[2001:db8::1]:4711"},
		{"forwarded unknown", http.Header{"Forwarded": {`for=unknown, for=10.1.1.1`}}, "10.1.1.1:0"},
		{"forwarded quoted comma", http.Header{"Forwarded": {`for=6.6.6.6;x="a,b"`}}, "6.6.6.6:0"},
		{"xff wins", http.Header{"Forwarded": {`for=7.7.7.7`}, "X-Forwarded-For": {"6.6.6.6"}}, "6.6.6.6:0"},
		{"none", http.Header{}, ""},
	} {
		got, ok := FromHeaders(tc.h, trusted)
		if s := got.String(); ok != (tc.want != "") || ok && s != tc.want {
			t.Errorf("%s: %v %v, want %q", tc.name, s, ok, tc.want)
		}
	}
}

// FuzzFromHeaders: whatever X-Forwarded-For and Forwarded say, FromHeaders
// never panics, and the address it reports is one the header named (an
// entry's address, never a made-up one), untrusted unless every entry it
// walked was trusted.
func FuzzFromHeaders(f *testing.F) {
	for _, s := range []string{"6.6.6.6, 10.1.1.1", "for=6.6.6.6;proto=https, for=\"[2001:db8::1]:4711\"", "unknown", "a,,b", `for="\"`, "[::1]", "1.2.3.4:80"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	trusted, _ := ParsePrefixes([]string{"10.0.0.0/8", "127.0.0.1/32"})
	f.Fuzz(func(t *testing.T, v string, forwarded bool) {
		h := http.Header{"X-Forwarded-For": {v}}
		if forwarded {
			h = http.Header{"Forwarded": {v}}
		}
		a, ok := FromHeaders(h, trusted)
		if !ok {
			return
		}
		if !a.IsValid() || a.Addr().Is4In6() || a.Addr().Zone() != "" {
			t.Fatalf("%q: invalid client %v", v, a)
		}
		if !strings.Contains(v, a.Addr().String()) && !strings.Contains(strings.ToLower(v), a.Addr().StringExpanded()) {
			// The header may write it differently (leading zeros in v6,
			// ::ffff: mapping): it must at least parse back from an entry.
			found := false
			for _, e := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' || r == '=' || r == ' ' || r == '"' }) {
				if n, ok := parseNode(e); ok && n.Addr() == a.Addr() {
					found = true
				}
			}
			if !found {
				t.Fatalf("%q: client %v is in no entry", v, a)
			}
		}
	})
}

package balance

import (
	"errors"
	"net/http"
	"net/url"
	"testing"
)

// TestHashOnKeyExtraction: the key of every hash_on kind, taken from the
// request without allocating; want "" means the request has no key.
func TestHashOnKeyExtraction(t *testing.T) {
	req := func(f func(r *http.Request)) *http.Request {
		r := &http.Request{Header: http.Header{}, URL: &url.URL{}, Host: "", RemoteAddr: ""}
		f(r)
		return r
	}
	cookie := func(lines ...string) *http.Request {
		return req(func(r *http.Request) { r.Header["Cookie"] = lines })
	}
	query := func(raw string) *http.Request {
		return req(func(r *http.Request) { r.URL.RawQuery = raw })
	}
	remote := func(a string) *http.Request {
		return req(func(r *http.Request) { r.RemoteAddr = a })
	}
	for _, tc := range []struct {
		name, hashOn string
		r            *http.Request
		want         string // the key as hashed (decoded, lower-cased)
	}{
		{"header", "header:X-User", req(func(r *http.Request) { r.Header.Set("X-User", "alice") }), "alice"},
		{"header lower-case config", "header:x-user", req(func(r *http.Request) { r.Header.Set("X-User", "alice") }), "alice"},
		{"header first value", "header:X-User", req(func(r *http.Request) { r.Header["X-User"] = []string{"a", "b"} }), "a"},
		{"header missing", "header:X-User", req(func(r *http.Request) { r.Header.Set("X-Other", "x") }), ""},
		{"header empty", "header:X-User", req(func(r *http.Request) { r.Header.Set("X-User", "") }), ""},
		{"header nil map", "header:X-User", &http.Request{}, ""},
		{"nil request", "header:X-User", nil, ""},

		{"cookie only", "cookie:sid", cookie("sid=abc"), "abc"},
		{"cookie among several", "cookie:sid", cookie("a=1; sid=abc; b=2"), "abc"},
		{"cookie last", "cookie:sid", cookie("a=1;sid=abc"), "abc"},
		{"cookie second line", "cookie:sid", cookie("a=1; b=2", "c=3; sid=xyz"), "xyz"},
		{"cookie first match", "cookie:sid", cookie("sid=one; sid=two"), "one"},
		{"cookie quoted", "cookie:sid", cookie(`a=1; sid="q v"`), "q v"},
		{"cookie name is a suffix", "cookie:sid", cookie("xsid=1; sidx=2"), ""},
		{"cookie case-sensitive", "cookie:sid", cookie("SID=1"), ""},
		{"cookie value with =", "cookie:sid", cookie("sid=a=b"), "a=b"},
		{"cookie empty", "cookie:sid", cookie("sid=; a=1"), ""},
		{"cookie missing", "cookie:sid", cookie("a=1"), ""},
		{"no cookie header", "cookie:sid", req(func(*http.Request) {}), ""},

		{"query only", "query:sid", query("sid=abc"), "abc"},
		{"query among several", "query:sid", query("a=1&sid=abc&b=2"), "abc"},
		{"query first match", "query:sid", query("sid=one&sid=two"), "one"},
		{"query decoded value", "query:sid", query("sid=a%20b+c%2F"), "a b c/"},
		{"query bad escape literal", "query:sid", query("sid=100%zz"), "100%zz"},
		{"query encoded name", "query:user id", query("x=1&user%20id=7"), "7"},
		{"query plus in name", "query:user id", query("user+id=8"), "8"},
		{"query name prefix", "query:sid", query("sidx=1&xsid=2"), ""},
		{"query no value", "query:sid", query("sid&a=1"), ""},
		{"query semicolon not a separator", "query:sid", query("a=1;sid=2"), ""},
		{"query missing", "query:sid", query(""), ""},
		{"query nil URL", "query:sid", &http.Request{}, ""},

		{"path", "path", req(func(r *http.Request) { r.URL.Path = "/a/b" }), "/a/b"},
		{"path empty", "path", req(func(*http.Request) {}), ""},

		{"authority", "authority", req(func(r *http.Request) { r.Host = "Example.COM:8443" }), "example.com:8443"},
		{"authority from URL", "authority", req(func(r *http.Request) { r.URL.Host = "b.example" }), "b.example"},
		{"authority missing", "authority", req(func(*http.Request) {}), ""},

		{"client IPv4", "client_ip", remote("192.0.2.7:51234"), "192.0.2.7"},
		{"client IPv4 no port", "client_ip", remote("192.0.2.7"), "192.0.2.7"},
		{"client IPv6", "client_ip", remote("[2001:db8::1]:443"), "2001:db8::1"},
		{"client IPv6 zone", "client_ip", remote("[fe80::1%eth0]:443"), "fe80::1%eth0"},
		{"client IPv6 no port", "client_ip", remote("2001:db8::1"), "2001:db8::1"},
		{"client IPv4-mapped", "client_ip", remote("[::ffff:192.0.2.7]:443"), "192.0.2.7"},
		{"client ::ffff: not mapped, a dot in the zone", "client_ip", remote("[::ffff:3030:3030:3030%eth0.100]:443"), "::ffff:3030:3030:3030%eth0.100"}, // FuzzHashKey
		{"client IPv4-translated", "client_ip", remote("[::ffff:0:192.0.2.7]:443"), "::ffff:0:192.0.2.7"},
		{"client missing", "client_ip", remote(""), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := parseHashOn(tc.hashOn)
			if err != nil {
				t.Fatal(err)
			}
			h, ok := k.hash(tc.r)
			if tc.want == "" {
				if ok {
					v, _ := k.value(tc.r)
					t.Fatalf("key %q found, want none", v)
				}
				return
			}
			if !ok {
				t.Fatalf("no key, want %q", tc.want)
			}
			if want := mix64(fnvString(fnvOffset64, tc.want)); h != want {
				v, _ := k.value(tc.r)
				t.Fatalf("hashed key differs from %q (raw value %q)", tc.want, v)
			}
			if a := testing.AllocsPerRun(100, func() { k.hash(tc.r) }); a != 0 {
				t.Errorf("%v allocations", a)
			}
		})
	}
}

// TestHashOnSameKeySameHash: equivalent spellings of one key hash alike.
func TestHashOnSameKeySameHash(t *testing.T) {
	for _, tc := range []struct {
		hashOn string
		a, b   *http.Request
	}{
		{"query:sid", &http.Request{URL: &url.URL{RawQuery: "sid=a+b"}}, &http.Request{URL: &url.URL{RawQuery: "x=1&sid=a%20b"}}},
		{"authority", &http.Request{Host: "WWW.example.com"}, &http.Request{Host: "www.EXAMPLE.com"}},
		{"client_ip", &http.Request{RemoteAddr: "192.0.2.1:1"}, &http.Request{RemoteAddr: "[::ffff:192.0.2.1]:2"}},
		{"client_ip", &http.Request{RemoteAddr: "[2001:db8::5]:1"}, &http.Request{RemoteAddr: "[2001:db8::5]:9"}},
	} {
		k, err := parseHashOn(tc.hashOn)
		if err != nil {
			t.Fatal(err)
		}
		ha, _ := k.hash(tc.a)
		hb, _ := k.hash(tc.b)
		if ha != hb {
			t.Errorf("%s: the two requests hash differently", tc.hashOn)
		}
	}
}

func TestCookieValueEdgeCases(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{"a=sid=x; sid=y", "y"},
		{"sid", ""},
		{"sid=", ""},
		{"x=1; sid", ""},
		{"x=1;\tsid=tab", "tab"},
		{"x=1;  sid=v ; y=2", "v"},
		{"sidsid=1; sid=2", "2"},
		{`sid=""`, ""},
	} {
		if got := cookieValue([]string{tc.line}, "sid"); got != tc.want {
			t.Errorf("cookie sid of %q = %q, want %q", tc.line, got, tc.want)
		}
	}
}

// TestHashKeyExported: HashKey hashes as consistent_hash does; "" and bad
// forms are errors; the zero HashKey has no key.
func TestHashKeyExported(t *testing.T) {
	k, err := ParseHashKey("header:X-User")
	if err != nil {
		t.Fatal(err)
	}
	on, _ := parseHashOn("header:X-User")
	r := &http.Request{Header: http.Header{"X-User": {"alice"}}}
	h, ok := k.Hash(r)
	want, _ := on.hash(r)
	if !ok || h != want || k.IsZero() {
		t.Errorf("Hash = %x %v, want %x", h, ok, want)
	}
	for _, bad := range []string{"", "header:", "header:Host", "nope"} {
		if _, err := ParseHashKey(bad); !errors.Is(err, ErrHashOn) {
			t.Errorf("ParseHashKey(%q) = %v", bad, err)
		}
	}
	if _, ok := (HashKey{}).Hash(r); ok || !(HashKey{}).IsZero() {
		t.Error("the zero HashKey hashed")
	}
}

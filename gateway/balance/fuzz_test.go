package balance

import (
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// FuzzHashKey checks consistent_hash key extraction against references
// written from RFC 6265 §5.4 (cookies), net/url (queries) and net/netip
// (client addresses):
//   - cookie:NAME is the value of the first pair named NAME over every
//     Cookie line, split on ";" with surrounding spaces and tabs dropped and
//     one pair of double quotes removed;
//   - query:NAME is, whenever url.ParseQuery accepts the query, its first
//     value of NAME; and the hash of an escaped value is the hash of the
//     decoded one ("%41" and "A" pick the same backend);
//   - authority hashes ignore ASCII case;
//   - client_ip is the address without port, an IPv4-mapped IPv6 address as
//     its IPv4 form, so "[::ffff:1.2.3.4]:5" and "1.2.3.4:5" hash alike.
//
// cookies holds Cookie lines separated by "\n" (HTTP/2 and HTTP/3 split the
// field).
func FuzzHashKey(f *testing.F) {
	f.Add("a=1; sid=abc; b=2", "sid", "a=1&sid=abc&b=2", "sid", "Web.Example.COM:443", []byte{1, 2, 3, 4}, uint16(5), "")
	f.Add("sid=\"q v\"\nx=1;sid=2", "sid", "user%20id=7&user+id=8", "user id", "[::1]:8443", []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 1, 2, 3, 4}, uint16(443), "")
	f.Add("xsid=1; sidx=2;  sid = 3; sid=\t4 \t", "sid", "sid=%zz&sid=1", "sid", "", []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint16(1), "eth0")
	f.Add("a=b=c; ;=; sid=\"\"", "sid", "sid&sid=;x", "sid", "ÄB", []byte{}, uint16(0), "")
	f.Fuzz(func(t *testing.T, cookies, cname, rawQuery, qname, host string, ip []byte, port uint16, zone string) {
		lines := strings.Split(cookies, "\n")
		if isToken(cname) {
			if got, want := cookieValue(lines, cname), refCookie(lines, cname); got != want {
				t.Fatalf("cookie %q of %q: %q, reference %q", cname, lines, got, want)
			}
		}

		raw := queryValue(rawQuery, qname)
		if vals, err := url.ParseQuery(rawQuery); err == nil {
			want := ""
			if vs := vals[qname]; len(vs) > 0 {
				want = vs[0]
			}
			if dec, err := url.QueryUnescape(raw); err != nil || dec != want {
				t.Fatalf("query %q of %q: %q (decoded %q, %v), net/url %q", qname, rawQuery, raw, dec, err, want)
			}
		}
		if dec, err := url.QueryUnescape(raw); err == nil {
			k := hashOn{kind: keyQuery, name: qname}
			r := &http.Request{URL: &url.URL{RawQuery: url.QueryEscape(qname) + "=" + raw}}
			got, ok := k.hash(r)
			if ok != (dec != "" || raw != "") || ok && got != mix64(fnvString(fnvOffset64, dec)) {
				t.Fatalf("query value %q: hash %x %v, want the hash of %q", raw, got, ok, dec)
			}
			if ok {
				r.URL.RawQuery = url.QueryEscape(qname) + "=" + url.QueryEscape(dec)
				if again, _ := k.hash(r); again != got {
					t.Fatalf("query value %q and %q hash differently", raw, url.QueryEscape(dec))
				}
			}
		}

		ka := hashOn{kind: keyAuthority}
		h1, ok1 := ka.hash(&http.Request{Host: host})
		h2, ok2 := ka.hash(&http.Request{Host: asciiLower(host)})
		if h1 != h2 || ok1 != ok2 || ok1 != (host != "") {
			t.Fatalf("authority %q and %q hash differently", host, asciiLower(host))
		}

		addr, ok := netip.AddrFromSlice(ip)
		if !ok {
			return
		}
		if addr.Is6() && !addr.Is4In6() && zone != "" && !strings.ContainsAny(zone, "%]") {
			addr = addr.WithZone(zone)
		}
		want := addr.Unmap().String()
		ap := netip.AddrPortFrom(addr, port).String()
		if got := clientIP(ap); got != want {
			t.Fatalf("client_ip of %q: %q, want %q", ap, got, want)
		}
		if got := clientIP(addr.String()); got != want {
			t.Fatalf("client_ip of %q (no port): %q, want %q", addr, got, want)
		}
		kc := hashOn{kind: keyClientIP}
		hm, _ := kc.hash(&http.Request{RemoteAddr: ap})
		hu, _ := kc.hash(&http.Request{RemoteAddr: netip.AddrPortFrom(addr.Unmap(), port).String()})
		if hm != hu {
			t.Fatalf("client_ip %q hashes unlike its IPv4 form", ap)
		}
		if r := (&http.Request{RemoteAddr: "[" + addr.String() + "]:" + strconv.Itoa(int(port))}); addr.Is4() {
			if got, _ := kc.value(r); got != want {
				t.Fatalf("client_ip of %q: %q, want %q", r.RemoteAddr, got, want)
			}
		}
	})
}

// refCookie is the value of the first cookie called name in lines, by
// RFC 6265 §5.4 with the quotes of §4.1.1 removed, or "".
func refCookie(lines []string, name string) string {
	for _, line := range lines {
		for _, pair := range strings.Split(line, ";") {
			pair = strings.Trim(pair, " \t")
			n, v, ok := strings.Cut(pair, "=")
			if !ok || n != name {
				continue
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return ""
}

// asciiLower lower-cases ASCII letters only (hosts compare that way).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

package balance

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
)

// keyKind is the source of a consistent_hash request key.
type keyKind uint8

const (
	keyHeader keyKind = iota + 1
	keyCookie
	keyQuery
	keyPath
	keyAuthority
	keyClientIP
)

// hashOnForms is the list of valid hash_on forms, for error messages.
const hashOnForms = "header:NAME, cookie:NAME, query:NAME, path, authority or client_ip"

// hashOn is a parsed Options.HashOn. name is the canonical header name
// (keyHeader), the cookie name (keyCookie) or the query parameter name
// (keyQuery, matched against percent-decoded parameter names).
type hashOn struct {
	kind keyKind
	name string
}

// parseHashOn parses an Options.HashOn value. Errors wrap ErrHashOn: empty,
// an unknown form, an empty name, a header or cookie name that is not an
// RFC 9110 token, and header:Host (use authority).
func parseHashOn(s string) (hashOn, error) {
	if s == "" {
		return hashOn{}, fmt.Errorf("%w: %s needs hash_on (%s)", ErrHashOn, ConsistentHash, hashOnForms)
	}
	kind, name, hasName := strings.Cut(s, ":")
	bad := func(why string) (hashOn, error) {
		return hashOn{}, fmt.Errorf("%w %q: %s", ErrHashOn, s, why)
	}
	var k hashOn
	switch kind {
	case "header":
		k.kind = keyHeader
	case "cookie":
		k.kind = keyCookie
	case "query":
		k.kind = keyQuery
	case "path":
		k.kind = keyPath
	case "authority":
		k.kind = keyAuthority
	case "client_ip":
		k.kind = keyClientIP
	default:
		return bad("want " + hashOnForms)
	}
	if k.kind >= keyPath {
		if hasName {
			return bad(kind + " takes no name")
		}
		return k, nil
	}
	if name == "" {
		return bad(kind + " name is empty")
	}
	switch k.kind {
	case keyHeader:
		if !isToken(name) {
			return bad("header name is not a valid token")
		}
		name = textproto.CanonicalMIMEHeaderKey(name)
		if name == "Host" {
			return bad("the Host header is not kept in the header map; use authority")
		}
	case keyCookie:
		if !isToken(name) {
			return bad("cookie name is not a valid token")
		}
	}
	k.name = name
	return k, nil
}

// isToken reports whether s is an RFC 9110 token (header and cookie names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// value returns the raw key of r, without allocating: a substring of the
// header, cookie, query, path, host or remote address. Query values are
// returned still percent-encoded (hash decodes them). ok is false when the
// request has no key or an empty one.
func (k hashOn) value(r *http.Request) (v string, ok bool) {
	if r == nil {
		return "", false
	}
	switch k.kind {
	case keyHeader:
		if vs := r.Header[k.name]; len(vs) > 0 {
			v = vs[0]
		}
	case keyCookie:
		v = cookieValue(r.Header["Cookie"], k.name)
	case keyQuery:
		if r.URL != nil {
			v = queryValue(r.URL.RawQuery, k.name)
		}
	case keyPath:
		if r.URL != nil {
			v = r.URL.Path
		}
	case keyAuthority:
		v = r.Host
		if v == "" && r.URL != nil {
			v = r.URL.Host
		}
	case keyClientIP:
		v = clientIP(r.RemoteAddr)
	}
	return v, v != ""
}

// hash returns the 64-bit hash of r's key, or false when r has none. The
// hash is FNV-1a 64 of the key (query values percent-decoded, authority
// lower-cased) followed by a 64-bit finalizer, identical on every instance.
func (k hashOn) hash(r *http.Request) (uint64, bool) {
	v, ok := k.value(r)
	if !ok {
		return 0, false
	}
	var h uint64
	switch k.kind {
	case keyQuery:
		h = fnvQueryUnescaped(v)
	case keyAuthority:
		h = fnvLower(v)
	default:
		h = fnvString(fnvOffset64, v)
	}
	return mix64(h), true
}

// cookieValue returns the value of the first cookie called name in the
// Cookie header lines hs ("a=1; b=2", possibly split over several lines as
// HTTP/2 and HTTP/3 allow), with surrounding double quotes removed, or "".
func cookieValue(hs []string, name string) string {
	for _, h := range hs {
		// Find name with the (vectorised) substring search, then check
		// that it is a whole cookie name: at the start of a pair and
		// followed by '='.
		for off := 0; off < len(h); {
			j := strings.Index(h[off:], name)
			if j < 0 {
				break
			}
			j += off
			end := j + len(name)
			if end < len(h) && h[end] == '=' && pairStart(h, j) {
				v := h[end+1:]
				if k := strings.IndexByte(v, ';'); k >= 0 {
					v = v[:k]
				}
				v = strings.TrimRight(v, " \t")
				if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
					v = v[1 : len(v)-1]
				}
				return v
			}
			off = j + 1
		}
	}
	return ""
}

// pairStart reports whether position j of a Cookie header line starts a
// name=value pair: only spaces or tabs separate it from the line start or
// the previous ';'.
func pairStart(h string, j int) bool {
	for j--; j >= 0; j-- {
		switch h[j] {
		case ' ', '\t':
		case ';':
			return true
		default:
			return false
		}
	}
	return true
}

// queryValue returns the raw (still percent-encoded) value of the first
// parameter of rawQuery whose percent-decoded name is name, or "".
// Parameters are separated by '&' only, as in net/url since Go 1.17.
func queryValue(rawQuery, name string) string {
	for rawQuery != "" {
		var part string
		part, rawQuery, _ = strings.Cut(rawQuery, "&")
		n, v, _ := strings.Cut(part, "=")
		if queryNameIs(n, name) {
			return v
		}
	}
	return ""
}

// queryNameIs reports whether the percent-decoded form of raw equals name.
func queryNameIs(raw, name string) bool {
	if raw == name {
		return true
	}
	j := 0
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		c, i = unescapeAt(raw, i, c)
		if j >= len(name) || name[j] != c {
			return false
		}
		j++
	}
	return j == len(name)
}

// unescapeAt decodes the query byte c = s[i]: '+' is a space, "%XX" a byte
// (a malformed escape stays literal). It returns the byte and the index of
// its last source byte.
func unescapeAt(s string, i int, c byte) (byte, int) {
	switch c {
	case '+':
		return ' ', i
	case '%':
		if i+2 < len(s) {
			if hi, ok := unhex(s[i+1]); ok {
				if lo, ok := unhex(s[i+2]); ok {
					return hi<<4 | lo, i + 2
				}
			}
		}
	}
	return c, i
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// clientIP returns the host part of a RemoteAddr ("1.2.3.4:5", "[::1]:5",
// or an address without port) without brackets; an IPv4-mapped IPv6 address
// (::ffff:1.2.3.4, as a dual-stack socket reports IPv4 clients) is reduced
// to its IPv4 form so both stacks hash alike.
func clientIP(a string) string {
	if a == "" {
		return ""
	}
	if a[0] == '[' {
		if j := strings.IndexByte(a, ']'); j > 0 {
			a = a[1:j]
		} else {
			a = a[1:]
		}
	} else if i := strings.IndexByte(a, ':'); i >= 0 && i == strings.LastIndexByte(a, ':') {
		a = a[:i] // host:port; several colons without brackets is a bare IPv6 address
	}
	if len(a) > 7 && strings.EqualFold(a[:7], "::ffff:") && isDottedQuad(a[7:]) {
		a = a[7:]
	}
	return a
}

// isDottedQuad reports whether s, past "::ffff:", is the dotted IPv4 of a
// mapped address: a dot and no colon before any zone ("%eth0.100"). A dot
// in the zone of ::ffff:a:b:c made that address hash as a:b:c (FuzzHashKey).
func isDottedQuad(s string) bool {
	if i := strings.IndexByte(s, '%'); i >= 0 {
		s = s[:i]
	}
	return strings.IndexByte(s, '.') >= 0 && strings.IndexByte(s, ':') < 0
}

// FNV-1a 64 (Fowler, Noll, Vo) parameters.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// fnvString continues the FNV-1a 64 hash h over s.
func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime64
	}
	return h
}

// fnvLower is FNV-1a 64 of s with ASCII letters lower-cased.
func fnvLower(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

// fnvQueryUnescaped is FNV-1a 64 of the percent-decoded form of s.
func fnvQueryUnescaped(s string) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < len(s); i++ {
		var c byte
		c, i = unescapeAt(s, i, s[i])
		h ^= uint64(c)
		h *= fnvPrime64
	}
	return h
}

// mix64 is the splitmix64 finalizer: it spreads FNV's weak low bits before
// the hash is reduced modulo the table size.
func mix64(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// HashKey is a request key parsed from the hash_on forms (header:NAME,
// cookie:NAME, query:NAME, path, authority, client_ip), for users of the
// same keys outside a balancing policy (a route's sticky split). The zero
// value has no key.
type HashKey struct{ on hashOn }

// ParseHashKey parses s in the hash_on forms. Errors wrap ErrHashOn: an
// empty s, an unknown form, an empty or invalid name, header:Host.
func ParseHashKey(s string) (HashKey, error) {
	if s == "" {
		return HashKey{}, fmt.Errorf("%w: empty key (%s)", ErrHashOn, hashOnForms)
	}
	k, err := parseHashOn(s)
	return HashKey{k}, err
}

// IsZero reports whether k has no key (the zero HashKey).
func (k HashKey) IsZero() bool { return k.on.kind == 0 }

// Hash is the 64-bit hash of r's key, the one consistent_hash uses (FNV-1a
// 64 and a finalizer, the same on every instance), without allocating; ok
// is false when r has no key or an empty one, or k is the zero HashKey.
func (k HashKey) Hash(r *http.Request) (h uint64, ok bool) {
	if k.on.kind == 0 {
		return 0, false
	}
	return k.on.hash(r)
}

package gateway

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
	"golang.org/x/net/http/httpguts"
)

// validRequestTarget reports whether a :path value can be forwarded as sent:
// "*" (OPTIONS, RFC 9110 §9.3.7), or a path starting with "/" without a
// space, "#" (a fragment is never sent, RFC 9110 §4.2.4) or a control byte,
// which no request-target may hold (RFC 9112 §3.2, RFC 3986 §2). Go's URL
// parser would otherwise escape them and the backend would see another path.
// Other bytes RFC 3986 leaves out but clients send unescaped in practice
// ("[", "]", "|", UTF-8) are allowed, as nginx and Envoy do.
func validRequestTarget(t string) bool {
	if t == "*" {
		return true
	}
	if t == "" || t[0] != '/' {
		return false
	}
	for i := 0; i < len(t); i++ {
		if c := t[i]; c <= ' ' || c == '#' || c == 0x7f {
			return false
		}
	}
	return true
}

// validAuthority reports whether host, the request's :authority or Host,
// may be routed and forwarded: empty (an in-process request), or
// host [":" port] by RFC 3986 §3.2.2–3.2.3 with the host required
// (RFC 9110 §4.2.2, https): bytes httpguts.ValidHostHeader accepts; an
// IP-literal is a bracketed IPv6 address without a zone (no IPvFuture); a
// reg-name or IPv4 address holds no ":", "[", "]" or percent-escape; a port
// is 1 to 5 digits up to 65535 (an empty one is refused too). Anything else ("a b", "[::1", "h:abc", ":443") is an invalid
// pseudo-header value, which makes the request malformed (RFC 9114 §4.1.2,
// §4.3.1).
func validAuthority(host string) bool {
	if host == "" {
		return true // built in process; a received one is checked by serve
	}
	if !httpguts.ValidHostHeader(host) {
		return false
	}
	if strings.HasPrefix(host, "[") {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return false
		}
		ip, err := netip.ParseAddr(host[1:end])
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return false
		}
		rest := host[end+1:]
		return rest == "" || (rest[0] == ':' && validPort(rest[1:]))
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		if !validPort(host[i+1:]) {
			return false
		}
		host = host[:i]
	}
	// A percent-escape is valid in a reg-name but is never a DNS name, and
	// host routes compare names as sent: "w%77w.example.com" would miss its
	// exact route and take a wildcard one.
	return host != "" && !strings.ContainsAny(host, ":[]%")
}

// validPort: 1 to 5 digits, at most 65535.
func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n <= 65535
}

// normalizeTarget returns the normalised path of r's request-target
// (pathnorm.NormalizePath with o) for matching and rewrites r.URL so that
// the backend receives the normalised path or, with o.ForwardAsSent, the
// path as sent (sentPath). "*" (OPTIONS, RFC 9110 §9.3.7) is returned as
// is. The query is never touched. Errors wrap pathnorm.ErrInvalidPath.
func normalizeTarget(r *http.Request, o *pathnorm.PathOptions) (string, error) {
	raw := r.RequestURI
	switch i := strings.IndexByte(raw, '?'); {
	case raw == "":
		raw = r.URL.EscapedPath() // built in process, not received
	case i >= 0:
		raw = raw[:i]
	}
	if raw == "*" {
		return raw, nil
	}
	norm, err := pathnorm.NormalizePath(raw, *o)
	if err != nil {
		return norm, err
	}
	fwd := norm
	if o.ForwardAsSent {
		fwd = sentPath(raw)
	}
	if fwd == raw {
		// Nothing a path may not hold raw: Go sends r.URL as received.
		return norm, nil
	}
	u := *r.URL
	u.RawPath = fwd
	u.Path, err = url.PathUnescape(fwd)
	if err != nil { // unreachable: NormalizePath has checked every escape
		return "", err
	}
	r.URL = &u
	return norm, nil
}

// sentPath is the path raw (valid escapes, no control byte, space or "#")
// as the backend gets it when forwarded as sent: unchanged but for the
// bytes a path may not hold raw (RFC 3986 §3.3: `"<>\^{|}`, the backquote,
// non-ASCII), percent-encoded. Go's url.URL would otherwise re-encode the
// whole path from its decoded form once one such byte appears, decoding
// "%2F" into a slash and encoding "!" (FuzzNormalizeTarget): a backend
// would then see segments and a route the gateway never matched. Returns
// raw itself when nothing needs encoding.
func sentPath(raw string) string {
	const hex = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c < 0x80 && c != '\\' && strings.IndexByte("\"<>^`{|}", c) < 0 {
			if b != nil {
				b = append(b, c)
			}
			continue
		}
		if b == nil {
			b = append(make([]byte, 0, len(raw)+8), raw[:i]...)
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	if b == nil {
		return raw
	}
	return string(b)
}

// Early data (TLS 1.3 0-RTT, RFC 8446 §2.3) can be replayed by an attacker
// who captured it, so a request that arrived in it may run more than once
// (RFC 8470 §1, RFC 9114 §10.9, RFC 9001 §9.2). The ingress that can
// receive it (QUIC) marks such requests (ingress.InEarlyData); the
// pipeline asks earlyDataAction what to do with them.

// earlyAction is what the pipeline does with a request, given whether it
// arrived in early data.
type earlyAction uint8

const (
	// earlyNone: not in early data; forwarded as it came, a client's own
	// Early-Data field included (RFC 8470 §5.1: an intermediary must not
	// remove it; the gateway never reads it).
	earlyNone earlyAction = iota
	// earlyForward: a safe method in early data, forwarded with
	// "Early-Data: 1" so the backend can answer 425 if it cannot risk a
	// replay (RFC 8470 §5.1).
	earlyForward
	// earlyReject: an unsafe method in early data, answered 425 Too Early
	// without reaching a backend; the client retries it after the handshake
	// (RFC 8470 §5.2).
	earlyReject
)

// earlyDataAction decides for a request with method that arrived in early
// data (early) or not. Safe methods (RFC 9110 §9.2.1: GET, HEAD, OPTIONS,
// TRACE) are forwarded, marked; every other method, including ones the
// gateway does not know, is refused, since only safe ones can be replayed
// without side effects.
func earlyDataAction(method string, early bool) earlyAction {
	if !early {
		return earlyNone
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return earlyForward
	}
	return earlyReject
}

// earlyDataOne is the value the gateway sets (RFC 8470 §5.1: "1" is the
// only one defined).
var earlyDataOne = []string{"1"}

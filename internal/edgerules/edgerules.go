// Package edgerules holds the checks of the edge-routing configuration
// that both the configuration language (hcl, at load, with file:line:column)
// and the gateway (gateway/cors, gateway/compress, when a config is
// applied) make, so the two can never disagree.
package edgerules

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// CheckOrigin returns o as an origin's ASCII serialization (lower-case,
// without the scheme's default port), or why o is not one: it must be
// "scheme://host[:port]", without user info, path, query or fragment.
// "null" (the origin of sandboxed documents and file: pages, which any
// page can take) and wildcards ("https://*.example.com") are refused.
func CheckOrigin(o string) (string, string) {
	if o == "null" {
		return "", `"null" is the origin of every sandboxed document and local file: allowing it allows any page that asks to be sandboxed`
	}
	if strings.Contains(o, "*") {
		return "", fmt.Sprintf("%q: wildcards are not supported; list each origin, or \"*\" alone", o)
	}
	u, err := url.Parse(o)
	switch {
	case err != nil || u.Scheme == "" || u.Opaque != "":
		return "", fmt.Sprintf("%q is not an origin (scheme://host[:port], as in \"https://app.example.com\")", o)
	case u.User != nil:
		return "", fmt.Sprintf("%q: an origin has no user info", o)
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Sprintf("%q: an origin has a host", o)
	case u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.HasSuffix(o, "#"):
		return "", fmt.Sprintf("%q: an origin has no path, query or fragment (a browser sends \"%s://%s\")", o, strings.ToLower(u.Scheme), strings.ToLower(u.Host))
	}
	host := strings.ToLower(u.Host)
	if port := u.Port(); port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Sprintf("%q: invalid port", o)
		}
		scheme := strings.ToLower(u.Scheme)
		if scheme == "https" && n == 443 || scheme == "http" && n == 80 {
			host = strings.TrimSuffix(host, ":"+port)
		}
	}
	return strings.ToLower(u.Scheme) + "://" + host, ""
}

// CheckMethod says why m cannot be an allowed method, or returns "": it
// must be a token (RFC 9110 §9.1), not one of the Fetch standard's
// forbidden methods (CONNECT, TRACE, TRACK), which no browser sends, nor
// a standard method in another case than upper (methods are
// case-sensitive, and fetch() upper-cases DELETE, GET, HEAD, OPTIONS,
// POST and PUT; PATCH is sent as written, and nearly always upper).
func CheckMethod(m string) string {
	switch {
	case !IsToken(m):
		return fmt.Sprintf("%q is not an HTTP method token", m)
	case m == "*":
		return `"*" is not supported for methods; list them`
	case strings.EqualFold(m, "CONNECT"), strings.EqualFold(m, "TRACE"), strings.EqualFold(m, "TRACK"):
		return fmt.Sprintf("%q is a forbidden method of the Fetch standard: no browser sends it", m)
	}
	for _, std := range []string{"DELETE", "GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH"} {
		if m != std && strings.EqualFold(m, std) {
			// Methods are case-sensitive; browsers upper-case these.
			return fmt.Sprintf("%q never matches: methods are case-sensitive and browsers send %q", m, std)
		}
	}
	return ""
}

// CheckHeader says why h is not a field name (RFC 9110 §5.1), or returns "".
func CheckHeader(h string) string {
	if !IsToken(h) {
		return fmt.Sprintf("%q is not a field name (RFC 9110 §5.1)", h)
	}
	return ""
}

// CheckMediaType says why t is not a media type a compress block can list
// ("type/subtype" or "type/*", RFC 9110 §8.3.1 tokens, no parameters), or
// returns "".
func CheckMediaType(t string) string {
	typ, sub, ok := strings.Cut(t, "/")
	switch {
	case !ok || !IsToken(typ) || (sub != "*" && !IsToken(sub)):
		return fmt.Sprintf("%q is not a media type (type/subtype or type/*, without parameters)", t)
	case typ == "*":
		return fmt.Sprintf("%q would compress every response, images and archives included; list the types that compress (\"text/*\", \"application/json\")", t)
	}
	return ""
}

// IsToken reports whether s is an RFC 9110 §5.6.2 token.
func IsToken(s string) bool {
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

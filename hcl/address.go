package hcl

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// AddressError is returned by ParseBackendAddress for an address that breaks
// the backend address rules of interface.md.
type AddressError struct {
	// Address is the input as given.
	Address string
	// Reason says what is wrong, e.g. `a path ("/x") is not allowed`.
	Reason string
}

// Error implements error: `hcl: invalid backend address "ADDR": REASON`.
func (e *AddressError) Error() string {
	return fmt.Sprintf("hcl: invalid backend address %q: %s", e.Address, e.Reason)
}

// ParseBackendAddress parses a backend address following interface.md
// ("Backend address rules"):
//
//   - "http://host[:port]": cleartext HTTP/1.1, scheme "http", default port 80;
//   - "https://host[:port]": HTTP/2 over TLS, scheme "https", default port 443;
//   - "h2c://host:port": cleartext HTTP/2 with prior knowledge (RFC 9113
//     §3.3), scheme "h2c"; the port is required (h2c has no default port);
//   - "host:port" or a bare "host": HTTP/2 over TLS, scheme "https", port 443
//     when absent.
//
// The scheme is matched case-insensitively. host is a DNS name (letters,
// digits, '-', '_', dots), an IPv4 address, or an IPv6 address written in
// brackets ("[::1]:8443"); it is returned without brackets. port is 1..65535.
// A lone trailing "/" after a scheme is accepted: for http and https an empty
// path and "/" are equivalent (RFC 3986 §6.2.3). Any other path, query,
// fragment, user information, other scheme or malformed port is an error of
// type *AddressError. The agent reuses this
// for Consul-discovered instances.
func ParseBackendAddress(s string) (scheme, host string, port int, err error) {
	fail := func(format string, args ...any) (string, string, int, error) {
		return "", "", 0, &AddressError{Address: s, Reason: fmt.Sprintf(format, args...)}
	}
	if s == "" {
		return fail("the address is empty")
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return fail("it contains white space")
	}
	scheme, defPort, rest := "https", 443, s
	if i := strings.Index(s, "://"); i >= 0 {
		switch strings.ToLower(s[:i]) {
		case "http":
			scheme, defPort = "http", 80
		case "https":
		case "h2c":
			scheme, defPort = "h2c", 0
		default:
			return fail("unsupported scheme %q; use http:// (HTTP/1.1), h2c:// (cleartext HTTP/2), https:// or no scheme (HTTP/2 over TLS)", s[:i])
		}
		rest = strings.TrimSuffix(s[i+3:], "/")
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		switch rest[i] {
		case '/':
			return fail("a path (%q) is not allowed", rest[i:])
		case '?':
			return fail("a query (%q) is not allowed", rest[i:])
		default:
			return fail("a fragment (%q) is not allowed", rest[i:])
		}
	}
	if strings.Contains(rest, "@") {
		return fail("user information is not allowed")
	}
	if rest == "" {
		return fail("the host is missing")
	}

	var portStr string
	hasPort := false
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return fail("missing ']' after the IPv6 address")
		}
		host = rest[1:end]
		if ip := net.ParseIP(host); ip == nil || !strings.Contains(host, ":") {
			return fail("%q is not an IPv6 address", host)
		}
		switch after := rest[end+1:]; {
		case after == "":
		case after[0] == ':':
			portStr, hasPort = after[1:], true
		default:
			return fail("unexpected %q after the IPv6 address", after)
		}
	} else {
		if strings.Count(rest, ":") > 1 {
			return fail("an IPv6 address must be in brackets, as in [::1]:8443")
		}
		host, portStr, hasPort = strings.Cut(rest, ":")
		if !validHostname(host) {
			return fail("%q is not a valid host name or IP address", host)
		}
	}
	if !hasPort {
		if defPort == 0 {
			return fail("the port is required for h2c://, as in \"h2c://%s:9090\"", rest)
		}
		return scheme, host, defPort, nil
	}
	p, ok := parsePort(portStr)
	if !ok || p == 0 {
		return fail("invalid port %q; must be 1-65535", portStr)
	}
	return scheme, host, p, nil
}

// parsePort parses a decimal port 0..65535 made of ASCII digits only.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	p, err := strconv.Atoi(s)
	if err != nil || p > 65535 {
		return 0, false
	}
	return p, true
}

// validHostname accepts DNS-style names (and dotted IPv4 addresses): labels of
// 1..63 letters, digits, '-' or '_' not starting or ending with '-', total at
// most 253 characters. A trailing dot is not accepted.
func validHostname(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// checkHostPort validates a listen or dial address "host:port". The host may
// be empty only when allowEmptyHost (listen on all interfaces); IPv6 hosts
// must be bracketed. Port 0 is accepted only when allowZeroPort. It returns a
// reason for messages, or "".
func checkHostPort(s string, allowEmptyHost, allowZeroPort bool) string {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf("%q is not host:port", s)
	}
	switch {
	case host == "" && !allowEmptyHost:
		return fmt.Sprintf("%q has no host", s)
	case host == "":
	case strings.Contains(host, ":"):
		if net.ParseIP(host) == nil {
			return fmt.Sprintf("%q is not a valid IPv6 address", host)
		}
	case !validHostname(host):
		return fmt.Sprintf("%q is not a valid host name or IP address", host)
	}
	p, ok := parsePort(portStr)
	if !ok || (p == 0 && !allowZeroPort) {
		lo := 1
		if allowZeroPort {
			lo = 0
		}
		return fmt.Sprintf("invalid port %q; must be a number %d-65535", portStr, lo)
	}
	return ""
}

// normalizeRouteHost validates a route host pattern and returns its canonical
// form: "" (any host), an exact lower-cased host name or IP (IPv6 without
// brackets), or "*.suffix" with a single leading wildcard label.
func normalizeRouteHost(s string) (string, string) {
	if s == "" {
		return "", ""
	}
	// ASCII case only, as the route table folds it: strings.ToLower would
	// accept the Kelvin sign (U+212A) as "k".
	h := strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
	if scheme, rest, ok := strings.Cut(h, "://"); ok {
		return "", fmt.Sprintf("%q: host must not include a scheme (%s://); the route matches the request's host only, as in %q", s, scheme, strings.SplitN(rest, "/", 2)[0])
	}
	if i := strings.IndexAny(h, "/?#"); i >= 0 {
		return "", fmt.Sprintf("%q: host must not include a path, query or fragment; use path_prefix for the path", s)
	}
	if strings.HasPrefix(h, "*.") {
		rest := h[2:]
		if strings.Contains(rest, "*") || !validHostname(rest) {
			return "", fmt.Sprintf("%q is not a valid wildcard; only a single leading \"*.\" is allowed, followed by a host name, as in \"*.example.com\"", s)
		}
		return h, ""
	}
	if strings.Contains(h, "*") {
		return "", fmt.Sprintf("%q is not a valid host; a wildcard is allowed only as a leading \"*.\", as in \"*.example.com\"", s)
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		if ip := net.ParseIP(h[1 : len(h)-1]); ip != nil {
			return h[1 : len(h)-1], ""
		}
	}
	if ip := net.ParseIP(h); ip != nil {
		return h, ""
	}
	if strings.Contains(h, ":") {
		return "", fmt.Sprintf("%q must not include a port (IPv6 addresses go in brackets)", s)
	}
	if !validHostname(h) {
		return "", fmt.Sprintf("%q is not a valid host name", s)
	}
	return h, ""
}

// isToken reports whether s is an RFC 9110 token (method and header names).
func isToken(s string) bool { return httpguts.ValidHeaderFieldName(s) }

// checkHashOn validates a consistent_hash key (interface.md): header:NAME,
// cookie:NAME, query:NAME, path, authority or client_ip. It returns a reason
// for messages, or "".
func checkHashOn(s string) string {
	switch s {
	case "path", "authority", "client_ip":
		return ""
	}
	kind, name, ok := strings.Cut(s, ":")
	if !ok {
		return fmt.Sprintf("%q is not one of header:NAME, cookie:NAME, query:NAME, path, authority, client_ip", s)
	}
	switch kind {
	case "header", "cookie":
		if !isToken(name) {
			return fmt.Sprintf("%q: %s name %q is not a valid token", s, kind, name)
		}
		if kind == "header" && strings.EqualFold(name, "host") {
			return fmt.Sprintf("%q: the Host header is the request's authority; use authority", s) // as gateway/balance refuses it
		}
	case "query":
		if name == "" || strings.ContainsAny(name, " \t&=#") {
			return fmt.Sprintf("%q: query parameter name %q is empty or contains ' ', '&', '=' or '#'", s, name)
		}
	default:
		return fmt.Sprintf("%q is not one of header:NAME, cookie:NAME, query:NAME, path, authority, client_ip", s)
	}
	return ""
}

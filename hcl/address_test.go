package hcl

import (
	"errors"
	"strings"
	"testing"
)

func TestParseBackendAddress(t *testing.T) {
	tests := []struct {
		in     string
		scheme string
		host   string
		port   int
		err    string // substring of the reason; "" means valid
	}{
		{in: "http://127.0.0.1:8080", scheme: "http", host: "127.0.0.1", port: 8080},
		{in: "http://example.com", scheme: "http", host: "example.com", port: 80},
		{in: "HTTP://Example.com:81", scheme: "http", host: "Example.com", port: 81},
		{in: "https://example.com", scheme: "https", host: "example.com", port: 443},
		{in: "https://example.com:8443", scheme: "https", host: "example.com", port: 8443},
		{in: "example.com:9000", scheme: "https", host: "example.com", port: 9000},
		{in: "example.com", scheme: "https", host: "example.com", port: 443},
		{in: "localhost", scheme: "https", host: "localhost", port: 443},
		{in: "10.0.0.1", scheme: "https", host: "10.0.0.1", port: 443},
		{in: "my_host.internal:1", scheme: "https", host: "my_host.internal", port: 1},
		{in: "[::1]:8443", scheme: "https", host: "::1", port: 8443},
		{in: "[::1]", scheme: "https", host: "::1", port: 443},
		{in: "http://[2001:db8::1]", scheme: "http", host: "2001:db8::1", port: 80},
		{in: "https://[fe80::1]:65535", scheme: "https", host: "fe80::1", port: 65535},

		{in: "", err: "empty"},
		{in: "http://", err: "host is missing"},
		{in: "http://host//", err: `a path ("/")`},
		{in: "http://host/", scheme: "http", host: "host", port: 80},
		{in: "https://[::1]:8443/", scheme: "https", host: "::1", port: 8443},
		{in: "http://host/api", err: `a path ("/api")`},
		{in: "host:80/x", err: "a path"},
		{in: "http:/host", err: "a path"},
		{in: "http://host?x=1", err: "a query"},
		{in: "host?", err: "a query"},
		{in: "https://host#frag", err: "a fragment"},
		{in: "http://user@host", err: "user information"},
		{in: "http://user:pw@host:80", err: "user information"},
		{in: "ftp://host", err: "unsupported scheme"},
		{in: "h2c://host", err: `the port is required for h2c://, as in "h2c://host:9090"`},
		{in: "h2c://[::1]", err: `as in "h2c://[::1]:9090"`},
		{in: "h2c://127.0.0.1:9090", scheme: "h2c", host: "127.0.0.1", port: 9090},
		{in: "H2C://[::1]:9090/", scheme: "h2c", host: "::1", port: 9090},
		{in: "h2c://host:9090/x", err: `a path ("/x")`},
		{in: "h2c://host:9090?a", err: "a query"},
		{in: "h2c://host:9090#f", err: "a fragment"},
		{in: "h2c://host:0", err: "invalid port"},
		{in: "h2://host:80", err: "h2c:// (cleartext HTTP/2)"},
		{in: "://host", err: "unsupported scheme"},
		{in: "host:", err: "invalid port"},
		{in: "host:0", err: "invalid port"},
		{in: "host:65536", err: "invalid port"},
		{in: "host:-1", err: "invalid port"},
		{in: "host:+80", err: "invalid port"},
		{in: "host:http", err: "invalid port"},
		{in: "host:123456", err: "invalid port"},
		{in: "::1", err: "brackets"},
		{in: "2001:db8::1:443", err: "brackets"},
		{in: "[::1", err: "missing ']'"},
		{in: "[::1]x", err: "after the IPv6"},
		{in: "[10.0.0.1]:80", err: "not an IPv6"},
		{in: "[host]:80", err: "not an IPv6"},
		{in: "ho st:80", err: "white space"},
		{in: "-host", err: "not a valid host"},
		{in: "host.", err: "not a valid host"},
		{in: "a..b", err: "not a valid host"},
		{in: "*.example.com", err: "not a valid host"},
		{in: ":80", err: "not a valid host"},
	}
	for _, tt := range tests {
		scheme, host, port, err := ParseBackendAddress(tt.in)
		if tt.err != "" {
			var ae *AddressError
			if !errors.As(err, &ae) {
				t.Errorf("%q: err = %v, want *AddressError", tt.in, err)
				continue
			}
			if !strings.Contains(ae.Reason, tt.err) {
				t.Errorf("%q: reason %q does not contain %q", tt.in, ae.Reason, tt.err)
			}
			if ae.Address != tt.in || !strings.HasPrefix(err.Error(), "hcl: invalid backend address") {
				t.Errorf("%q: bad error %q", tt.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: unexpected error %v", tt.in, err)
			continue
		}
		if scheme != tt.scheme || host != tt.host || port != tt.port {
			t.Errorf("%q = (%q, %q, %d), want (%q, %q, %d)", tt.in, scheme, host, port, tt.scheme, tt.host, tt.port)
		}
	}
}

func TestCheckHostPort(t *testing.T) {
	tests := []struct {
		in              string
		emptyHost, zero bool
		ok              bool
	}{
		{"127.0.0.1:9901", false, false, true},
		{"localhost:9901", false, false, true},
		{"[::1]:9901", false, false, true},
		{":8443", true, false, true},
		{":8443", false, false, false},
		{"127.0.0.1:0", false, true, true},
		{"127.0.0.1:0", false, false, false},
		{"127.0.0.1", true, true, false},
		{"::1:80", true, true, false},
		{"127.0.0.1:http", true, true, false},
		{"127.0.0.1:70000", true, true, false},
		{"bad host:80", true, true, false},
		{"[zz::1]:80", true, true, false},
	}
	for _, tt := range tests {
		why := checkHostPort(tt.in, tt.emptyHost, tt.zero)
		if (why == "") != tt.ok {
			t.Errorf("checkHostPort(%q, %v, %v) = %q, want ok=%v", tt.in, tt.emptyHost, tt.zero, why, tt.ok)
		}
	}
}

func TestNormalizeRouteHost(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", "", true},
		{"example.com", "example.com", true},
		{"Web.Example.COM", "web.example.com", true},
		{"*.example.com", "*.example.com", true},
		{"*.Example.com", "*.example.com", true},
		{"127.0.0.1", "127.0.0.1", true},
		{"[::1]", "::1", true},
		{"::1", "::1", true},
		{"*", "", false},
		{"*.", "", false},
		{"*example.com", "", false},
		{"a.*.example.com", "", false},
		{"*.*.example.com", "", false},
		{"example.com:443", "", false},
		{"exa mple.com", "", false},
		{"example.com.", "", false},
		{"\u212a.example.com", "", false}, // the Kelvin sign is no "k" (ASCII case only, as routes match)
		{"*.\u212a.example.com", "", false},
	}
	for _, tt := range tests {
		got, why := normalizeRouteHost(tt.in)
		if (why == "") != tt.ok || got != tt.want {
			t.Errorf("normalizeRouteHost(%q) = %q, %q; want %q ok=%v", tt.in, got, why, tt.want, tt.ok)
		}
	}
}

func TestCheckHashOn(t *testing.T) {
	for _, ok := range []string{"path", "authority", "client_ip", "header:X-User", "cookie:session", "query:user"} {
		if why := checkHashOn(ok); why != "" {
			t.Errorf("checkHashOn(%q) = %q, want ok", ok, why)
		}
	}
	for _, bad := range []string{"", "body", "header:", "header:X User", "cookie:a;b", "query:", "query:a=b", "host", "Path", "ip:x"} {
		if why := checkHashOn(bad); why == "" {
			t.Errorf("checkHashOn(%q) accepted", bad)
		}
	}
}

func TestIsToken(t *testing.T) {
	for _, ok := range []string{"GET", "POST", "PURGE", "M-SEARCH", "get"} {
		if !isToken(ok) {
			t.Errorf("isToken(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "PO ST", "GET\n", "(GET)", "GÉT"} {
		if isToken(bad) {
			t.Errorf("isToken(%q) = true", bad)
		}
	}
}

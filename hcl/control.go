package hcl

import (
	"errors"
	"net"
	"os"
	"strings"
)

// buildControl converts the control block. A control API that can reload the
// configuration (and, with enable_debug, serve pprof) must not be open to
// the network by accident: a non-loopback address without token_file is an
// error unless allow_unauthenticated = true (issue 9, point 5).
func buildControl(top blk, r *rawControl) Control {
	c := Control{Address: DefaultControlAddress}
	if r == nil {
		return c
	}
	b := top.child("control", r.DefRange)
	c.Address = b.str(r.Address, DefaultControlAddress)
	c.AddressRange = rangeOf(r.Address)
	addrOK := true
	if why := checkHostPort(c.Address, true, true); why != "" {
		b.errorf(r.Address, "", "Invalid address", "%s.", why)
		addrOK = false
	}
	var tokenOK bool
	c.TokenFile, tokenOK = b.fileOK(r.TokenFile)
	c.TokenFileRange = rangeOf(r.TokenFile)
	if tokenOK { // never read a device or FIFO: /dev/zero would not end
		// Never fail open: an empty token would switch authentication off.
		if data, err := os.ReadFile(c.TokenFile); err == nil {
			if _, err := ParseToken(data); err != nil {
				b.errorf(r.TokenFile, "", "Unusable token file", "%q %v.", c.TokenFile, err)
			}
		}
	}
	c.EnableDebug = b.boolean(r.EnableDebug, false)
	c.AllowUnauthenticated = b.boolean(r.AllowUnauthenticated, false)
	if addrOK && c.TokenFile == "" && !c.AllowUnauthenticated && !IsLoopbackAddress(c.Address) {
		b.errorf(r.Address, "", "Unauthenticated control API",
			"%q is reachable from other hosts and control has no token_file: anyone who reaches it could reload the configuration. Use a loopback address (127.0.0.1), set token_file, or set allow_unauthenticated = true.", c.Address)
	}
	return c
}

// ParseToken returns the control API token held by a token_file's data:
// the file without surrounding whitespace (a trailing newline). Errors: an
// empty token, which would switch authentication off (never fail open: a
// rotation caught mid-write), and a token with whitespace, a control byte
// or a non-ASCII byte inside (several lines, say), which a client could not
// send as "Authorization: Bearer <token>" (RFC 9110 §11.4, RFC 6750 §2.1).
func ParseToken(data []byte) (string, error) {
	// A UTF-8 byte order mark is what Windows editors and PowerShell 5
	// put before the text, not part of the token.
	token := strings.Trim(strings.TrimPrefix(string(data), "\uFEFF"), " \t\r\n") // ASCII whitespace only: a no-break space is refused below
	if token == "" {
		return "", errors.New("holds no token; the control API would be open")
	}
	if strings.ContainsFunc(token, func(c rune) bool { return c <= ' ' || c >= 0x7f }) {
		return "", errors.New("holds whitespace, a control character or a non-ASCII character inside the token (more than one line?); a client could not send it in an Authorization header")
	}
	return token, nil
}

// IsLoopbackAddress reports whether host:port s binds only the loopback
// interface: host "localhost" or a loopback IP (127.0.0.0/8, ::1). An empty
// host, 0.0.0.0, ::, any other IP and any other host name are not.
func IsLoopbackAddress(s string) bool {
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

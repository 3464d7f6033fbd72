package hcl

import (
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
	c.TokenFile = b.file(r.TokenFile)
	c.TokenFileRange = rangeOf(r.TokenFile)
	if c.TokenFile != "" {
		// Never fail open: an empty token would switch authentication off.
		if data, err := os.ReadFile(c.TokenFile); err == nil && strings.TrimSpace(string(data)) == "" {
			b.errorf(r.TokenFile, "", "Empty token file", "%q holds no token; the control API would be open.", c.TokenFile)
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

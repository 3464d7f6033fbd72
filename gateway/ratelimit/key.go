package ratelimit

import (
	"hash/maphash"
	"net/http"
	"net/netip"
)

// Key names one bucket of a Limiter: a client address, or the 64-bit hash
// of a string (a header value, a route). It is comparable and holds no
// pointer into the request, so a table of keys stays the same size
// whatever clients send. Build it with AddrKey, StringKey or Limiter.Key.
type Key struct {
	addr netip.Addr
	h    uint64 // hash of addr or of the string; picks the shard
}

// seed keys the hashes per process: clients cannot aim two values at one
// bucket or one shard (the limits are per gateway instance, so nothing
// needs the same hash elsewhere).
var seed = maphash.MakeSeed()

// AddrKey is the key of client address a (its zone dropped, an IPv4-mapped
// IPv6 address as IPv4).
func AddrKey(a netip.Addr) Key {
	a = a.Unmap().WithZone("")
	b := a.As16()
	return Key{addr: a, h: maphash.Bytes(seed, b[:])}
}

// StringKey is the key of s. Different strings get different keys except
// for a 64-bit hash collision (about 2⁻⁶⁴ per pair, per process).
func StringKey(s string) Key { return Key{h: maphash.String(seed, s)} }

// Key is the bucket key of r for l's key form: client_ip from r.RemoteAddr
// ("ip:port", "[ip%zone]:port" or a bare address; anything else, such as a
// request built in process without one, shares the bucket of the zero
// address); header:NAME from the first value of the header (absent and
// empty share one bucket); route from route, the matched route's identity.
// It does not allocate (an IPv6 zone in RemoteAddr aside).
func (l *Limiter) Key(r *http.Request, route string) Key {
	switch l.kind {
	case kindHeader:
		if v := r.Header[l.header]; len(v) > 0 {
			return StringKey(v[0])
		}
		return StringKey("")
	case kindRoute:
		return StringKey(route)
	}
	return AddrKey(remoteAddr(r.RemoteAddr))
}

// remoteAddr parses a RemoteAddr; the zero Addr when it is not one.
func remoteAddr(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr()
	}
	a, _ := netip.ParseAddr(s)
	return a
}

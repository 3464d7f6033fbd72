// Package clientaddr is who is calling: the client address of a request
// behind balancers (the PROXY protocol's, or the right-most untrusted entry
// of X-Forwarded-For / Forwarded from a trusted forwarder), the CIDR sets
// that say whom to trust, and the IP allow/deny rules applied to it.
//
// The ingress settles the client address once per request, at its entry,
// and carries it in r.RemoteAddr (so every consumer — client_ip rate
// limits, client_ip hashing, IP rules, the access log, the trace span —
// reads the same value). The addresses it replaces travel in the request
// context: Peer (the hop the gateway appends to X-Forwarded-For) and Socket
// (the TCP or UDP peer of the connection, a balancer behind PROXY).
package clientaddr

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Prefixes is a set of CIDR prefixes (IPv4 and IPv6); nil or empty holds
// no address.
type Prefixes []netip.Prefix

// ParsePrefixes parses CIDR strings ("10.0.0.0/8", "2001:db8::/32"). A
// prefix is masked to its network ("10.1.2.3/8" is 10.0.0.0/8). Errors: a
// string that is not a CIDR prefix (a bare address included: write /32 or
// /128), naming the first such string.
func ParsePrefixes(cidrs []string) (Prefixes, error) {
	if len(cidrs) == 0 {
		return nil, nil
	}
	out := make(Prefixes, 0, len(cidrs))
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR prefix (like 10.0.0.0/8 or 2001:db8::/32)", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Contains reports whether a is in one of the prefixes. An IPv4-mapped
// IPv6 address (::ffff:10.0.0.1) is taken as its IPv4 address, and an IPv6
// zone is ignored (fe80::1%eth0 is in fe80::/10; netip.Prefix.Contains
// alone would say no, letting a zoned peer past ip_deny).
func (ps Prefixes) Contains(a netip.Addr) bool {
	a = a.Unmap().WithZone("")
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Rules are the IP allow and deny lists of a listener or route (Traefik's
// IPAllowList, nginx's allow/deny): deny wins over allow, and an empty
// allow list allows every address not denied.
type Rules struct {
	Allow, Deny Prefixes
}

// Empty reports whether r lets every address through.
func (r Rules) Empty() bool { return len(r.Allow) == 0 && len(r.Deny) == 0 }

// Allows reports whether a may call. The zero Addr (no client address) is
// allowed only by empty rules.
func (r Rules) Allows(a netip.Addr) bool {
	if r.Empty() {
		return true
	}
	if !a.IsValid() || r.Deny.Contains(a) {
		return false
	}
	return len(r.Allow) == 0 || r.Allow.Contains(a)
}

// Of is the client address of r: the host of r.RemoteAddr, which the
// ingress set once (the zero Addr when it is not an ip:port).
func Of(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

type ctxKey int

const (
	peerKey ctxKey = iota
	socketKey
)

// WithSocket is ctx carrying the connection's socket peer (ip:port) when it
// differs from the address the connection reports (a balancer that sent a
// PROXY header). The TCP ingress sets it once per connection.
func WithSocket(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, socketKey, addr)
}

// WithPeer is ctx carrying the request's hop (ip:port): the address its
// connection came from, kept when r.RemoteAddr is replaced by a client
// address taken from forwarding headers.
func WithPeer(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, peerKey, addr)
}

// Peer is the hop r came from (ip:port): the PROXY header's source or the
// socket peer, before forwarding headers were believed. It is the address
// the gateway appends to X-Forwarded-For.
func Peer(r *http.Request) string {
	if v, ok := r.Context().Value(peerKey).(string); ok {
		return v
	}
	return r.RemoteAddr
}

// Socket is the TCP or UDP peer of r's connection (ip:port): the balancer,
// behind PROXY; otherwise Peer.
func Socket(r *http.Request) string {
	if v, ok := r.Context().Value(socketKey).(string); ok {
		return v
	}
	return Peer(r)
}

// FromHeaders is the client address that trusted forwarders report in h:
// the right-most entry of X-Forwarded-For that trusted does not hold (each
// forwarder appends the address it saw, so entries right of it were added
// by trusted hops and everything left of it may be the client's own
// invention). When every entry is trusted, the left-most. An entry that is
// not an address ends the walk: the last trusted one walked is the answer.
// Without X-Forwarded-For the for= parameters of Forwarded (RFC 7239 §4,
// §5.2, §6) are read the same way. The port is that of a Forwarded node
// ("[2001:db8::1]:4711"), else 0. ok is false when no header names an
// address.
//
// The caller believes it only from a trusted peer.
func FromHeaders(h http.Header, trusted Prefixes) (client netip.AddrPort, ok bool) {
	if v := h["X-Forwarded-For"]; len(v) > 0 {
		return rightmost(v, trusted, splitXFF)
	}
	if v := h["Forwarded"]; len(v) > 0 {
		return rightmost(v, trusted, splitForwarded)
	}
	return netip.AddrPort{}, false
}

// rightmost walks the entries of the field lines vs right to left.
func rightmost(vs []string, trusted Prefixes, split func(string) []string) (netip.AddrPort, bool) {
	var last netip.AddrPort
	found := false
	for i := len(vs) - 1; i >= 0; i-- {
		entries := split(vs[i])
		for j := len(entries) - 1; j >= 0; j-- {
			a, ok := parseNode(entries[j])
			if !ok {
				return last, found
			}
			last, found = a, true
			if !trusted.Contains(a.Addr()) {
				return a, true
			}
		}
	}
	return last, found
}

// splitXFF splits one X-Forwarded-For line at its commas.
func splitXFF(v string) []string { return strings.Split(v, ",") }

// splitForwarded is the for= value of each element of one Forwarded line
// (RFC 7239 §4: elements by ",", pairs by ";", names case-insensitive,
// values a token or a quoted string); "" for an element without for=.
func splitForwarded(v string) []string {
	var out []string
	for _, elem := range splitQuoted(v, ',') {
		node := ""
		for _, pair := range splitQuoted(elem, ';') {
			name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if ok && strings.EqualFold(strings.TrimSpace(name), "for") {
				node = strings.TrimSpace(value)
			}
		}
		out = append(out, node)
	}
	return out
}

// splitQuoted splits s at sep outside double quotes.
func splitQuoted(s string, sep byte) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && quoted:
			i++
		case s[i] == '"':
			quoted = !quoted
		case s[i] == sep && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// parseNode parses one entry: an address, ip:port, [v6] or [v6]:port,
// possibly quoted (Forwarded's node, RFC 7239 §6). "unknown" and
// obfuscated identifiers are not addresses.
func parseNode(s string) (netip.AddrPort, bool) {
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.AddrPortFrom(a.Unmap(), 0), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && a.Zone() == "" {
			return netip.AddrPortFrom(a.Unmap(), 0), true
		}
		return netip.AddrPort{}, false
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return netip.AddrPort{}, false
	}
	ap, err := netip.ParseAddrPort(net.JoinHostPort(host, port))
	if err != nil || ap.Addr().Zone() != "" {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

package hcl

import (
	"fmt"
	"net/netip"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// proxy_protocol modes (interface.md, edge-auth issue).
const (
	// ProxyProtocolRequired: a trusted peer must send a PROXY header (the
	// default; the HAProxy spec asks receivers never to guess).
	ProxyProtocolRequired = "required"
	// ProxyProtocolOptional: a trusted peer may omit it.
	ProxyProtocolOptional = "optional"
)

// proxy_protocol udp formats: the header a UDP balancer prepends to each
// QUIC datagram (interface.md, edge-auth issue; README "Client address").
const (
	// ProxyProtocolUDPSPP is Cloudflare Spectrum's Simple Proxy Protocol
	// (a fixed 38-byte header, sent back on replies).
	ProxyProtocolUDPSPP = "spp"
	// ProxyProtocolUDPV2 is a PROXY protocol v2 header with the DGRAM
	// transport (HAProxy proxy-protocol.txt §2.2).
	ProxyProtocolUDPV2 = "v2"
)

// ProxyProtocol is listener.proxy_protocol: HAProxy PROXY protocol v1 and
// v2 headers on the listener's TCP connections, read before TLS, and with
// udp set a header on each QUIC datagram.
type ProxyProtocol struct {
	// Trusted are the balancers' CIDR prefixes, not empty: only they may
	// send a header (one from any other peer closes the connection, or
	// drops the datagram).
	Trusted []string
	// Mode is ProxyProtocolRequired (default) or ProxyProtocolOptional.
	Mode string
	// UDP is "" (default: no header on UDP, HTTP/3 sees the socket
	// address), ProxyProtocolUDPSPP or ProxyProtocolUDPV2.
	UDP string
	// Range is the block's definition range.
	Range hcl2.Range
}

// ForwardedHeaders is listener.forwarded_headers: the forwarders whose
// X-Forwarded-For (or RFC 7239 Forwarded) the listener believes.
type ForwardedHeaders struct {
	// Trusted are the forwarders' CIDR prefixes; empty (the default)
	// believes no one.
	Trusted []string
	// Range is the block's definition range.
	Range hcl2.Range
}

// rawProxyProtocol is listener.proxy_protocol.
type rawProxyProtocol struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Trusted *hcl2.Attribute `hcl:"trusted,optional"`
	Mode    *hcl2.Attribute `hcl:"mode,optional"`
	UDP     *hcl2.Attribute `hcl:"udp,optional"`
}

func (r *rawProxyProtocol) defRange() hcl2.Range { return r.DefRange }

// rawForwardedHeaders is listener.forwarded_headers.
type rawForwardedHeaders struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Trusted *hcl2.Attribute `hcl:"trusted,optional"`
}

func (r *rawForwardedHeaders) defRange() hcl2.Range { return r.DefRange }

// checkCIDR returns why s is not a CIDR prefix ("10.0.0.0/8",
// "2001:db8::/32"), or "". A bare address is refused with the prefix to
// write instead.
func checkCIDR(s string) string {
	p, err := netip.ParsePrefix(s)
	if err == nil && p.Addr().Zone() == "" {
		return ""
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return fmt.Sprintf("%q is an address, not a CIDR prefix; write %q for that one address", s, netip.PrefixFrom(a, a.BitLen()).String())
	}
	return fmt.Sprintf("%q is not a CIDR prefix (like \"10.0.0.0/8\" or \"2001:db8::/32\")", s)
}

// cidrList reads a list of CIDR prefixes (nil when absent).
func (b blk) cidrList(a *hcl2.Attribute) []string {
	return b.strList(a, checkCIDR)
}

// buildProxyProtocol converts listener.proxy_protocol (nil: none). tcp
// reports whether the listener serves h1 or h2 (PROXY headers on TCP), h3
// whether it serves HTTP/3 (udp headers on QUIC datagrams).
func buildProxyProtocol(b blk, r *rawProxyProtocol, tcp, h3 bool) *ProxyProtocol {
	if r == nil {
		return nil
	}
	b = b.child("proxy_protocol", r.DefRange)
	pp := &ProxyProtocol{Range: r.DefRange, Mode: ProxyProtocolRequired}
	before := b.errCount()
	pp.Trusted = b.cidrList(r.Trusted)
	if len(pp.Trusted) == 0 && b.errCount() == before {
		b.errorf(r.Trusted, "trusted", "Missing trusted", "proxy_protocol needs trusted: the CIDR prefixes of the balancers that send PROXY headers, as in [\"10.0.0.0/8\"].")
	}
	if mode, ok := b.strOK(r.Mode, ProxyProtocolRequired); ok {
		if mode != ProxyProtocolRequired && mode != ProxyProtocolOptional {
			b.errorf(r.Mode, "", "Invalid mode", "%q is not a mode; use \"required\" (a trusted peer must send a header) or \"optional\".", mode)
		} else {
			pp.Mode = mode
		}
	}
	if udp, ok := b.strOK(r.UDP, ""); ok {
		switch udp {
		case "", ProxyProtocolUDPSPP, ProxyProtocolUDPV2:
			pp.UDP = udp
		default:
			b.errorf(r.UDP, "", "Invalid udp", "%q is not a UDP header format; use \"spp\" (Cloudflare Spectrum's Simple Proxy Protocol), \"v2\" (a PROXY protocol v2 header on each datagram) or \"\" (none: HTTP/3 sees the balancer's address).", udp)
		}
	}
	switch {
	case pp.UDP != "" && !h3:
		b.add(hcl2.DiagWarning, b.subject(r.UDP), "No effect", b.field("udp")+": the header is read on QUIC datagrams, and this listener does not serve HTTP/3 (protocols has no \"h3\").")
	case !tcp && pp.UDP == "":
		b.add(hcl2.DiagWarning, &r.DefRange, "No effect", b.field("")+": the PROXY protocol is read on TCP connections, and this listener serves neither h1 nor h2; set udp = \"spp\" or \"v2\" to read a header on QUIC datagrams.")
	}
	return pp
}

// buildForwardedHeaders converts listener.forwarded_headers (nil: none).
func buildForwardedHeaders(b blk, r *rawForwardedHeaders) *ForwardedHeaders {
	if r == nil {
		return nil
	}
	b = b.child("forwarded_headers", r.DefRange)
	return &ForwardedHeaders{Range: r.DefRange, Trusted: b.cidrList(r.Trusted)}
}

package agent

import (
	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// listenerClient converts the listener settings that decide who is calling
// (proxy_protocol, forwarded_headers, ip_allow, ip_deny) into lc.
func listenerClient(lc *gateway.ListenerConfig, l hcl.Listener) {
	if pp := l.ProxyProtocol; pp != nil {
		lc.ProxyProtocol = &gateway.ProxyProtocol{Trusted: prefixes(pp.Trusted), Optional: pp.Mode == hcl.ProxyProtocolOptional,
			UDP: udpHeaders[pp.UDP]}
	}
	if fh := l.ForwardedHeaders; fh != nil {
		lc.ForwardedTrusted = prefixes(fh.Trusted)
	}
	lc.IPRules = clientaddr.Rules{Allow: prefixes(l.IPAllow), Deny: prefixes(l.IPDeny)}
}

// udpHeaders are the gateway's UDP header formats by proxy_protocol.udp
// value (hcl accepts no other).
var udpHeaders = map[string]gateway.UDPHeader{
	"":                      gateway.UDPNone,
	hcl.ProxyProtocolUDPSPP: gateway.UDPSPP,
	hcl.ProxyProtocolUDPV2:  gateway.UDPProxyV2,
}

// routeIPRules converts a route's ip_allow and ip_deny.
func routeIPRules(r hcl.Route) clientaddr.Rules {
	return clientaddr.Rules{Allow: prefixes(r.IPAllow), Deny: prefixes(r.IPDeny)}
}

// prefixes parses CIDR lists hcl validated (checkCIDR accepts exactly what
// clientaddr.ParsePrefixes does), so it cannot fail here.
func prefixes(cidrs []string) clientaddr.Prefixes {
	p, err := clientaddr.ParsePrefixes(cidrs)
	if err != nil {
		panic("agent: a CIDR list passed validation but does not parse: " + err.Error())
	}
	return p
}

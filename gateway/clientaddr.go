package gateway

import (
	"net/http"

	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/ingress"
	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// ProxyProtocol is a listener's PROXY protocol setting
// (ListenerConfig.ProxyProtocol, ingress.ProxyProtocol).
type ProxyProtocol = ingress.ProxyProtocol

// UDPHeader is the header a UDP balancer prepends to each QUIC datagram
// (ProxyProtocol.UDP, ingress.UDPHeader).
type UDPHeader = ingress.UDPHeader

// The UDP header formats (ingress.UDPNone, ingress.UDPSPP,
// ingress.UDPProxyV2).
const (
	UDPNone    = ingress.UDPNone    // no header: HTTP/3 sees the socket address
	UDPSPP     = ingress.UDPSPP     // Cloudflare Spectrum's Simple Proxy Protocol
	UDPProxyV2 = ingress.UDPProxyV2 // PROXY protocol v2, DGRAM
)

// routeAllows applies the IP rules of the route r matched
// (RouteConfig.IPRules) to r's client address, the one the listener
// settled once (clientaddr.Of). The listener's own rules ran before
// routing (ingress).
func routeAllows(tbl *table, rt *route.Route[*upstream.Upstream], r *http.Request) bool {
	c := tbl.configs[rt.Target.Name()]
	if c == nil || rt.Index >= len(c.Routes) {
		return true
	}
	rules := &c.Routes[rt.Index].IPRules
	return rules.Empty() || rules.Allows(clientaddr.Of(r))
}

package gateway

import (
	"net/http"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
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

// routeAdmits applies the IP rules of the route r matched
// (RouteConfig.IPRules) to r's client address, the one the listener
// settled once (clientaddr.Of): answer.IPDenied for an address they refuse,
// answer.TooEarly for one they allow in early data, zero otherwise. The
// listener's own rules ran before routing (ingress).
//
// An address in 0-RTT data is not validated yet (RFC 9000 §8.1: the server
// has not seen the client answer at it; a spoofed source, or a spoofed
// balancer's datagram header, is accepted with a session ticket), so it
// cannot be what lets a request in: 425 makes the client send it again
// after the handshake (RFC 8470 §5.2).
func routeAdmits(tbl *table, rt *route.Route[*upstream.Upstream], r *http.Request) answer.Answer {
	c := tbl.configs[rt.Target.Name()]
	if c == nil || rt.Index >= len(c.Routes) {
		return answer.Answer{}
	}
	rules := &c.Routes[rt.Index].IPRules
	switch {
	case rules.Empty():
		return answer.Answer{}
	case !rules.Allows(clientaddr.Of(r)):
		return answer.IPDenied
	case ingress.InEarlyData(r):
		return answer.TooEarly
	}
	return answer.Answer{}
}

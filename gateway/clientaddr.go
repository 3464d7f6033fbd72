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

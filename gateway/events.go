package gateway

import (
	"github.com/hashicorp/go-metrics"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// onEvent logs backend lifecycle transitions and counts health changes.
func (g *Gateway) onEvent(e upstream.Event) {
	switch e.Kind {
	case "added", "removed":
		g.log.Debug("backend "+e.Kind, "upstream", e.Upstream, "backend", e.Backend)
		return
	case "health":
		g.log.Info("backend health changed", "upstream", e.Upstream, "backend", e.Backend, "from", e.From.String(), "to", e.To.String(), "reason", e.Reason)
	case "ejected":
		g.log.Warn("backend ejected", "upstream", e.Upstream, "backend", e.Backend, "reason", e.Reason)
	case "returned":
		g.log.Info("backend returned from ejection", "upstream", e.Upstream, "backend", e.Backend)
	case "dns_changed":
		g.log.Info("backend addresses changed; idle connections rotated", "upstream", e.Upstream, "backend", e.Backend)
	case "dns_empty", "dns_failed":
		g.log.Warn("backend DNS refresh kept the last usable addresses", "upstream", e.Upstream, "backend", e.Backend, "outcome", e.Kind)
	}
	g.metrics.m.IncrCounterWithLabels(metricHealthTransitions, 1, []metrics.Label{
		{Name: "upstream", Value: e.Upstream}, {Name: "kind", Value: e.Kind}, {Name: "to", Value: e.To.String()},
	})
}

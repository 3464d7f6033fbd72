package gateway

import "github.com/impulse-agent/impulse-agent/gateway/upstream"

// Response counts for the status page: per upstream (by name, so they
// outlive the reloads that rebuild an upstream) and per backend
// (upstream.Backend.Responses), counted once per request by record.

// keepTraffic publishes the counters of next's upstreams, reusing the
// current ones by name. Called before next is published, so every request
// routed by next finds its counter.
func (g *Gateway) keepTraffic(next *table) {
	old := g.traffic.Load()
	m := make(map[string]*upstream.ResponseCounter, len(next.upstreams))
	for name := range next.upstreams {
		if old != nil && (*old)[name] != nil {
			m[name] = (*old)[name]
		} else {
			m[name] = new(upstream.ResponseCounter)
		}
	}
	g.traffic.Store(&m)
}

// countResponse counts one recorded response on its upstream and backend
// (either may be nil); reason set means the gateway produced the answer.
// Two atomic adds each and a map lookup: no allocation.
func (g *Gateway) countResponse(up *upstream.Upstream, b *upstream.Backend, status int, reason string) {
	if b != nil {
		b.Responses().Count(status, reason != "")
	}
	if up != nil {
		if m := g.traffic.Load(); m != nil {
			if c := (*m)[up.Name()]; c != nil {
				c.Count(status, reason != "")
			}
		}
	}
}

// Traffic returns the cumulative response counts of every upstream, by
// name, since the upstream name first appeared in the configuration.
func (g *Gateway) Traffic() map[string]upstream.ResponseCounts {
	m := g.traffic.Load()
	if m == nil {
		return map[string]upstream.ResponseCounts{}
	}
	out := make(map[string]upstream.ResponseCounts, len(*m))
	for name, c := range *m {
		out[name] = c.Load()
	}
	return out
}

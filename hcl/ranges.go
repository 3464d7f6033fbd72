package hcl

import hcl2 "github.com/hashicorp/hcl/v2"

// rangeOf is the source range of attribute a's value, the range a
// diagnostic about it points at; the zero Range when a is absent.
func rangeOf(a *hcl2.Attribute) hcl2.Range {
	if a == nil {
		return hcl2.Range{}
	}
	return a.Expr.Range()
}

// fillRanges copies the source ranges of the values that are only checked
// later, by the agent (binding an address, loading TLS material), into c:
// the agent's errors then point at the same file:line:column as validate's.
// Duplicate blocks were dropped by the builder; the first of each name is
// the one kept.
func fillRanges(c *Config, m *rawFile) {
	listeners := map[string]*rawListener{}
	for _, r := range m.Listeners {
		if listeners[r.Name] == nil {
			listeners[r.Name] = r
		}
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		r := listeners[l.Name]
		if r == nil {
			continue
		}
		l.AddressRange = rangeOf(r.Address)
		if r.TLS != nil {
			l.TLS.CertFileRange, l.TLS.KeyFileRange = rangeOf(r.TLS.CertFile), rangeOf(r.TLS.KeyFile)
		}
	}
	upstreams := map[string]*rawUpstream{}
	for _, r := range m.Upstreams {
		if upstreams[r.Name] == nil {
			upstreams[r.Name] = r
		}
	}
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		if r := upstreams[u.Name]; r != nil && r.TLS != nil && u.TLS != nil {
			clientTLSRanges(u.TLS, r.TLS)
		}
	}
	if c.Consul != nil && m.Consul != nil {
		c.Consul.TokenFileRange = rangeOf(m.Consul.TokenFile)
		if c.Consul.TLS != nil && m.Consul.TLS != nil {
			clientTLSRanges(c.Consul.TLS, m.Consul.TLS)
		}
	}
}

func clientTLSRanges(t *TLS, r *rawTLS) {
	t.CAFileRange, t.CertFileRange, t.KeyFileRange = rangeOf(r.CAFile), rangeOf(r.CertFile), rangeOf(r.KeyFile)
}

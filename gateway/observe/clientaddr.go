package observe

import "github.com/hashicorp/go-metrics/prometheus"

// impulse_proxy_protocol_refused{listener,reason}: TCP connections a
// listener closed before TLS for their PROXY protocol header (README
// "Client address"). Reasons: ProxyMissing, ProxyUntrusted, ProxyMalformed,
// ProxyTimeout.
var metricProxyRefused = []string{"proxy_protocol", "refused"}

// The reasons of impulse_proxy_protocol_refused.
const (
	ProxyMissing   = "missing"   // a trusted peer sent no header (mode required), nothing in time, or closed first
	ProxyUntrusted = "untrusted" // a header from a peer outside trusted
	ProxyMalformed = "malformed" // not a valid v1 or v2 header (HAProxy PROXY protocol spec), or a v1 one not sent at once
	ProxyTimeout   = "timeout"   // a v2 header begun but not completed within read_header_timeout
)

var clientAddrCounters = []prometheus.CounterDefinition{
	{Name: metricProxyRefused, Help: "TCP connections closed before TLS for their PROXY protocol header, by listener and reason (missing, untrusted, malformed, timeout)."},
}

// proxyRefusedKey is one impulse_proxy_protocol_refused series.
type proxyRefusedKey struct{ listener, reason string }

func (k proxyRefusedKey) upstreamName() string { return "" }

func (k proxyRefusedKey) emit(gm *Metrics, d uint64) {
	gm.m.IncrCounterWithLabels(metricProxyRefused, float32(d), labels("listener", k.listener, "reason", k.reason))
}

// ProxyProtocolRefused counts one connection closed for its PROXY header.
func (gm *Metrics) ProxyProtocolRefused(listener, reason string) {
	add(&gm.proxyRefused, proxyRefusedKey{listener, reason})
}

// ProxyProtocolRefusals is the count of listener and reason.
func (gm *Metrics) ProxyProtocolRefusals(listener, reason string) uint64 {
	return load(&gm.proxyRefused, proxyRefusedKey{listener, reason})
}

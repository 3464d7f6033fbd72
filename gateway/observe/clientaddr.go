package observe

import "github.com/hashicorp/go-metrics/prometheus"

// impulse_proxy_protocol_refused{listener,transport,reason}: what a
// listener refused for its PROXY protocol (or SPP) header (README "Client
// address"): on transport "tcp" a connection closed before TLS, on
// transport "udp" a QUIC datagram dropped before quic-go saw it. Reasons:
// ProxyMissing, ProxyUntrusted, ProxyMalformed, ProxyTimeout (TCP only).
var metricProxyRefused = []string{"proxy_protocol", "refused"}

// The reasons of impulse_proxy_protocol_refused.
const (
	ProxyMissing   = "missing"   // a trusted peer sent no header (mode required), nothing in time, or closed first
	ProxyUntrusted = "untrusted" // a header from a peer outside trusted
	ProxyMalformed = "malformed" // not a valid header (HAProxy PROXY protocol spec, Cloudflare SPP), or a v1 one not sent at once
	ProxyTimeout   = "timeout"   // a v2 header begun but not completed within read_header_timeout (TCP)
)

// The transports of impulse_proxy_protocol_refused: what one count is.
const (
	ProxyTCP = "tcp" // a TCP connection, closed
	ProxyUDP = "udp" // a UDP datagram, dropped
)

var clientAddrCounters = []prometheus.CounterDefinition{
	{Name: metricProxyRefused, Help: "TCP connections closed before TLS (transport tcp) and QUIC datagrams dropped (transport udp) for their PROXY protocol or SPP header, by listener and reason (missing, untrusted, malformed, timeout)."},
}

// proxyRefusedKey is one impulse_proxy_protocol_refused series.
type proxyRefusedKey struct{ listener, transport, reason string }

func (k proxyRefusedKey) upstreamName() string { return "" }

func (k proxyRefusedKey) emit(gm *Metrics, d uint64) {
	gm.m.IncrCounterWithLabels(metricProxyRefused, float32(d), labels("listener", k.listener, "transport", k.transport, "reason", k.reason))
}

// ProxyProtocolRefused counts one connection closed (transport ProxyTCP)
// or one datagram dropped (ProxyUDP) for its header.
func (gm *Metrics) ProxyProtocolRefused(listener, transport, reason string) {
	add(&gm.proxyRefused, proxyRefusedKey{listener, transport, reason})
}

// ProxyProtocolRefusals is the count of listener, transport and reason.
func (gm *Metrics) ProxyProtocolRefusals(listener, transport, reason string) uint64 {
	return load(&gm.proxyRefused, proxyRefusedKey{listener, transport, reason})
}

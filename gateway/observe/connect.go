package observe

import (
	"math"

	"github.com/hashicorp/go-metrics/prometheus"
)

// The Connect (service mesh) family, issue 23 (interface.md):
//
//	impulse_connect_leaf_expiry_seconds{service}        gauge: seconds until the leaf's NotAfter
//	impulse_connect_authorizations{result,source}       counter of mesh authorization outcomes
//	impulse_connect_h3_fallbacks{upstream}              counter of HTTP/3 → TCP fallbacks
//
// service is the gateway's Connect identity (one per agent), source a
// peer's Consul service name ("" when the peer had no valid identity),
// upstream an upstream name: bounded labels. result is one of the
// ConnectResult values or a refused certificate's reason (mesh.Reason*:
// no_roots, no_certificate, expired, untrusted, bad_identity,
// trust_domain, or mesh.ReasonNoIntentions), so "counted by reason" needs
// no second family. A mesh listener counts one outcome per handshake and
// one per request (gateway/mesh.Inbound).
var (
	metricConnectLeafExpiry    = []string{"connect", "leaf_expiry_seconds"}
	metricConnectAuthorization = []string{"connect", "authorizations"}
	metricConnectH3Fallbacks   = []string{"connect", "h3_fallbacks"}
)

// Results of impulse_connect_authorizations besides certificate refusals.
const (
	ConnectAllow = "allow" // an intention (or the default) allowed a connection or request
	ConnectDeny  = "deny"  // denied: 403 intention_denied, or the handshake closed
)

// connectCounters have definitions; the leaf expiry gauge has none, for
// the reason metricCertExpiry has none (an unlabelled 0 would read as an
// expired leaf).
var connectCounters = []prometheus.CounterDefinition{
	{Name: metricConnectAuthorization, Help: "Service mesh authorization outcomes on mesh listeners, by result (allow, deny, or why a peer certificate was refused: no_roots, no_certificate, expired, untrusted, bad_identity, trust_domain, no_intentions), one per handshake and one per request, and source (the peer's Consul service, \"\" without a valid identity)."},
	{Name: metricConnectH3Fallbacks, Help: "Requests to a Connect upstream that fell back from HTTP/3 to TCP after a failed QUIC handshake, by upstream."},
}

// connectKey is one impulse_connect_authorizations series, never tied to
// an upstream (always live).
type connectKey struct{ result, source string }

func (connectKey) upstreamName() string { return "" }

func (k connectKey) emit(gm *Metrics, d uint64) {
	gm.m.IncrCounterWithLabels(metricConnectAuthorization, float32(d), labels("result", k.result, "source", k.source))
}

// ConnectAuthorization counts one mesh authorization outcome: one atomic
// add once the series exists.
func (gm *Metrics) ConnectAuthorization(result, source string) {
	add(&gm.connectAuths, connectKey{result, source})
}

// ConnectAuthorizations is the count of one series (for tests).
func (gm *Metrics) ConnectAuthorizations(result, source string) uint64 {
	return load(&gm.connectAuths, connectKey{result, source})
}

// ConnectLeafExpiry sets the leaf expiry gauge of the Connect identity
// service: seconds left, whole seconds rounded down (negative once
// expired).
func (gm *Metrics) ConnectLeafExpiry(service string, seconds float64) {
	gm.m.SetPrecisionGaugeWithLabels(metricConnectLeafExpiry, math.Floor(seconds), labels("service", service))
}

// ConnectH3Fallback counts one fallback from HTTP/3 to TCP towards a
// Connect upstream (rare: a go-metrics call each).
func (gm *Metrics) ConnectH3Fallback(upstream string) {
	gm.m.IncrCounterWithLabels(metricConnectH3Fallbacks, 1, labels("upstream", upstream))
}

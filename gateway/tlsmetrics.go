package gateway

import (
	"math"
	"time"

	"github.com/hashicorp/go-metrics"
)

// metricCertExpiry is impulse_tls_certificate_expiry_seconds{listener,name}:
// seconds until a served certificate's NotAfter (negative once expired).
// Seconds remaining, as the name reads in Prometheus' conventions (a
// "_seconds" gauge without "_timestamp" is a duration); the Unix time of
// the expiry is time() + the value. It is re-set every second, so a
// "< 14 * 86400" alert needs no arithmetic. It has no GaugeDefinition:
// go-metrics would add an unlabelled series stuck at 0, which such an
// alert would take for an expired certificate.
var metricCertExpiry = []string{"tls", "certificate", "expiry_seconds"}

// tlsSettings is what the request path and the sampler need of a
// listener's TLS settings beyond its *tls.Config.
type tlsSettings struct {
	forwardClientCert bool
	expiry            map[string]time.Time
}

// setListenerTLS publishes the TLS settings of the listeners now running;
// applyListenersLocked calls it once they are in place.
func (g *Gateway) setListenerTLS(lcs []ListenerConfig) {
	m := make(map[string]tlsSettings, len(lcs))
	for _, lc := range lcs {
		m[lc.Name] = tlsSettings{forwardClientCert: lc.ForwardClientCert, expiry: lc.CertificateExpiry}
	}
	g.tlsSettings.Store(&m)
	g.sampleTLS(time.Now())
}

// sampleTLS sets the certificate expiry gauges. A certificate or listener
// that a reload removed keeps its last value until
// telemetry.prometheus_retention drops the series (go-metrics cannot
// delete one).
func (g *Gateway) sampleTLS(now time.Time) {
	m := g.tlsSettings.Load()
	if m == nil {
		return
	}
	for listener, lt := range *m {
		for name, notAfter := range lt.expiry {
			g.metrics.m.SetPrecisionGaugeWithLabels(metricCertExpiry, math.Floor(notAfter.Sub(now).Seconds()),
				[]metrics.Label{{Name: "listener", Value: listener}, {Name: "name", Value: name}})
		}
	}
}

package observe

import "math"

// metricCertExpiry is impulse_tls_certificate_expiry_seconds{listener,name}:
// seconds until a served certificate's NotAfter (negative once expired).
// Seconds remaining, as the name reads in Prometheus' conventions (a
// "_seconds" gauge without "_timestamp" is a duration); the Unix time of
// the expiry is time() + the value. It is re-set every second, so a
// "< 14 * 86400" alert needs no arithmetic. It has no GaugeDefinition:
// go-metrics would add an unlabelled series stuck at 0, which such an
// alert would take for an expired certificate.
var metricCertExpiry = []string{"tls", "certificate", "expiry_seconds"}

// CertificateExpiry sets the expiry gauge of one served certificate:
// seconds left, whole seconds rounded down.
func (gm *Metrics) CertificateExpiry(listener, name string, seconds float64) {
	gm.m.SetPrecisionGaugeWithLabels(metricCertExpiry, math.Floor(seconds), labels("listener", listener, "name", name))
}

package gateway

import (
	"sort"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// What the status page shows beyond the control API's first snapshots:
// HAProxy's per-server row (last check, last change, ramp, responses by
// class) and the listeners with their certificates.

// BackendDetail is the part of BackendInfo added for the status page
// (embedded: its fields are BackendInfo's in JSON).
type BackendDetail struct {
	// ConfiguredWeight is the weight Weight ramps up to; SlowStartUntil is
	// the end of a running slow-start ramp (absent: none running).
	ConfiguredWeight int        `json:"configured_weight"`
	SlowStartUntil   *time.Time `json:"slow_start_until,omitempty"`
	// LastCheck is the last active-check result (absent: checks off or
	// none yet).
	LastCheck *CheckResult `json:"last_check,omitempty"`
	// LastChange is the last health change, ejection or return from one;
	// the backend's creation before any (absent for suppressed members).
	LastChange *time.Time `json:"last_change,omitempty"`
	// Ejections counts the backend's ejections that set the next one's
	// length; FailedChecks the consecutive failed active checks.
	Ejections    int `json:"ejections"`
	FailedChecks int `json:"failed_checks"`
	// Responses counts the responses of the requests sent to the backend.
	Responses upstream.ResponseCounts `json:"responses"`
}

// CheckResult is one active health-check result.
type CheckResult struct {
	At time.Time `json:"at"`
	OK bool      `json:"ok"`
	// Reason names a failure: "timeout", "connect", "status 503", ...
	Reason string `json:"reason,omitempty"`
}

func detailOf(b *upstream.Backend) BackendDetail {
	h := b.Health.Detail()
	d := BackendDetail{ConfiguredWeight: b.ConfiguredWeight(), Ejections: h.Ejections, FailedChecks: h.FailRun,
		Responses: b.Responses().Load()}
	if t := b.SlowStartUntil(); !t.IsZero() {
		d.SlowStartUntil = &t
	}
	if !h.LastCheck.IsZero() {
		d.LastCheck = &CheckResult{At: h.LastCheck, OK: h.LastCheckOK, Reason: h.LastCheckReason}
	}
	if !h.LastChange.IsZero() {
		d.LastChange = &h.LastChange
	}
	return d
}

// upstreamLoad fills the concurrency and response counts of info.
func (g *Gateway) upstreamLoad(t *table, name string, info *UpstreamInfo) {
	if l := t.limiters[name]; l != nil {
		info.InFlight, info.Queue, info.MaxRequests = l.InFlight(), l.Waiting(), l.Limits().Max
	}
	if c := g.obs.Traffic.Of(name); c != nil {
		info.Responses = c.Load()
	}
}

// ListenerInfo describes one running listener for the status page.
type ListenerInfo struct {
	Name string `json:"name"`
	// Address is the configured address; UDP and TCP the bound sockets
	// ("" when no protocol needs one).
	Address    string   `json:"address"`
	UDPAddress string   `json:"udp_address,omitempty"`
	TCPAddress string   `json:"tcp_address,omitempty"`
	Protocols  []string `json:"protocols"`
	// InFlight is the requests being handled, over every protocol.
	InFlight int64 `json:"in_flight"`
	// Certificates are the certificates TLS serves, by name ("default",
	// or a certificate's first DNS SAN), sorted by name.
	Certificates []CertificateInfo `json:"certificates"`
}

// CertificateInfo is one served certificate's expiry.
type CertificateInfo struct {
	Name     string    `json:"name"`
	NotAfter time.Time `json:"not_after"`
	// ExpiresInSeconds is the time left until NotAfter, negative once
	// expired (the impulse_tls_certificate_expiry_seconds gauge).
	ExpiresInSeconds int64 `json:"expires_in_seconds"`
}

// Listeners returns the running listeners sorted by name.
func (g *Gateway) Listeners() []ListenerInfo {
	now := time.Now()
	var expiry map[string]tlsSettings
	if m := g.tlsSettings.Load(); m != nil {
		expiry = *m
	}
	g.mu.Lock()
	out := make([]ListenerInfo, 0, len(g.listeners))
	for name, l := range g.listeners {
		li := ListenerInfo{Name: name, Address: l.addr, Protocols: l.protos.Load().names(), InFlight: l.active.Load(), Certificates: []CertificateInfo{}}
		udp, tcp := l.sockets()
		if udp != nil {
			li.UDPAddress = udp.LocalAddr().String()
		}
		if tcp != nil {
			li.TCPAddress = tcp.Addr().String()
		}
		for cert, notAfter := range expiry[name].expiry {
			li.Certificates = append(li.Certificates, CertificateInfo{Name: cert, NotAfter: notAfter,
				ExpiresInSeconds: int64(notAfter.Sub(now) / time.Second)})
		}
		sort.Slice(li.Certificates, func(i, j int) bool { return li.Certificates[i].Name < li.Certificates[j].Name })
		out = append(out, li)
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

package gateway

import (
	"slices"
	"sort"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/compress"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// RouteInfo is one route as reported by the control API, in match order.
type RouteInfo struct {
	Upstream   string `json:"upstream"`
	Host       string `json:"host"`
	PathPrefix string `json:"path_prefix"`
	// Path and PathRegex are an exact-path or path_regex route's matcher
	// (PathPrefix is then ""); omitted otherwise.
	Path      string   `json:"path,omitempty"`
	PathRegex string   `json:"path_regex,omitempty"`
	Methods   []string `json:"methods"`
	// Upgrades are the protocols the route tunnels (RouteConfig.Upgrades).
	Upgrades []string `json:"upgrades"`
	// Auth names the route's authentication methods in the order they run
	// (auth.Config.Methods: api_key, basic, jwt, forward); omitted when
	// none. Never a key, a user or a URL with credentials.
	Auth []string `json:"auth,omitempty"`
	// IPRules is true when the route has ip_allow or ip_deny rules
	// (RouteConfig.IPRules; the listener's are on /v1/listeners).
	IPRules bool `json:"ip_rules,omitempty"`
	// Compress names the codings the route offers, most preferred first
	// (RouteConfig.Compress); omitted without a compress block. CORS is
	// true when the route has a cors block.
	Compress []string `json:"compress,omitempty"`
	CORS     bool     `json:"cors,omitempty"`
	// Splits are the route's weighted splits and Sticky their hash key
	// (RouteConfig.Splits, Sticky); omitted when none.
	Splits []SplitConfig `json:"splits,omitempty"`
	Sticky string        `json:"sticky,omitempty"`
}

// routeInfo describes route rc of upstream.
func routeInfo(upstream string, rc *RouteConfig) RouteInfo {
	ri := RouteInfo{Upstream: upstream, Host: rc.Host, PathPrefix: rc.PathPrefix, Path: rc.Path, PathRegex: rc.PathRegex, Methods: nonNil(rc.Methods),
		Upgrades: upgradesOf(rc.Upgrades), Auth: rc.Auth.Methods(), IPRules: !rc.IPRules.Empty(), CORS: rc.CORS != nil,
		Splits: rc.Splits, Sticky: rc.Sticky}
	if c := rc.Compress; c != nil {
		ri.Compress = c.Algorithms
		if ri.Compress == nil {
			ri.Compress = compress.DefaultAlgorithms
		}
	}
	return ri
}

// UpstreamInfo describes one upstream for the control API.
type UpstreamInfo struct {
	Name          string      `json:"name"`
	LoadBalancing string      `json:"load_balancing"`
	Routes        []RouteInfo `json:"routes"`
	Backends      []string    `json:"backends"`
	// Pending is true while a discovery-fed upstream has not synced.
	Pending bool `json:"discovery_pending"`
	// InFlight and Queue are the requests the upstream's concurrency
	// limit counts and holds waiting (limits max_requests, max_queue;
	// MaxRequests 0: no limit). Responses counts its responses by class
	// since the upstream's name first appeared (reloads keep it).
	InFlight    int64                   `json:"in_flight"`
	Queue       int64                   `json:"queue"`
	MaxRequests int                     `json:"max_requests"`
	Responses   upstream.ResponseCounts `json:"responses"`
}

// BackendInfo is the snapshot of one backend for the control API.
type BackendInfo struct {
	ID       string `json:"id"`
	Upstream string `json:"upstream"`
	Source   string `json:"source"` // static | discovery
	Address  string `json:"address"`
	// Protocol is "http/1.1" (cleartext), "h2" (HTTP/2 over TLS) or "h2c"
	// (cleartext HTTP/2 with prior knowledge).
	Protocol string `json:"protocol"`
	// Health is the active-check status: unknown (no check yet or checks
	// off), healthy or unhealthy, with the canonical reason of the last
	// failure. Ejected is true while passive tracking has ejected it, until
	// EjectedUntil. Eligible combines them. Membership is "active" for
	// backends in the upstream's set, "removed" while one drains,
	// "suppressed" for a known member withheld from traffic (HealthReason
	// says why, e.g. an unusable Consul address or scheme).
	Health       string     `json:"health"`
	HealthReason string     `json:"health_reason,omitempty"`
	Ejected      bool       `json:"ejected"`
	EjectedUntil *time.Time `json:"ejected_until,omitempty"`
	// Behind is true while the backend holds outlier detection's
	// consecutive_failures requests sent since its last answer and its
	// siblings answered since: new requests skip it (README "Safe by
	// default"). It is not an ejection and ends with its next answer.
	Behind     bool   `json:"behind"`
	Eligible   bool   `json:"eligible"`
	Membership string `json:"membership"`
	// Resolution is the address state: IP literal, or hostname with its
	// last usable addresses and refresh outcome.
	Resolution upstream.Resolution `json:"resolution"`
	InFlight   int64               `json:"in_flight"`
	Requests   uint64              `json:"requests"`
	Weight     int                 `json:"weight"`
	BackendDetail
}

// Routes returns the route table in match order.
func (g *Gateway) Routes() []RouteInfo {
	t := g.table.Load()
	out := make([]RouteInfo, 0, len(t.routes.Routes()))
	for _, r := range t.routes.Routes() {
		info := RouteInfo{Upstream: r.Upstream, Host: r.Host, PathPrefix: r.PathPrefix, Path: r.Path, PathRegex: r.PathRegex, Methods: nonNil(r.Methods), Upgrades: upgradesOf(r.Upgrades)}
		if c := t.configs[r.Upstream]; c != nil && r.Index < len(c.Routes) {
			info = routeInfo(r.Upstream, &c.Routes[r.Index])
		}
		out = append(out, info)
	}
	return out
}

// Upstreams returns every upstream sorted by name.
func (g *Gateway) Upstreams() []UpstreamInfo {
	t := g.table.Load()
	out := make([]UpstreamInfo, 0, len(t.upstreams))
	for name, u := range t.upstreams {
		cfg := t.config(name)
		set := u.Current()
		info := UpstreamInfo{Name: name, LoadBalancing: orDefault(cfg.LoadBalancing, "round_robin"), Pending: set.Pending, Backends: []string{}}
		g.upstreamLoad(t, name, &info) // status.go
		for i := range cfg.Routes {
			info.Routes = append(info.Routes, routeInfo(name, &cfg.Routes[i]))
		}
		for _, b := range set.Backends {
			info.Backends = append(info.Backends, b.ID)
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Backends returns the backends of every upstream, sorted by upstream and id.
func (g *Gateway) Backends() []BackendInfo {
	t := g.table.Load()
	var out []BackendInfo
	g.mu.Lock()
	retired := slices.Clone(g.retired)
	g.mu.Unlock()
	for _, u := range retired {
		for _, b := range u.Draining() {
			out = append(out, backendInfo(u.Name(), b))
		}
	}
	for name, u := range t.upstreams {
		set := u.Current()
		for _, b := range set.Backends {
			out = append(out, backendInfo(name, b))
		}
		for _, b := range u.Draining() {
			out = append(out, backendInfo(name, b))
		}
		for _, sp := range set.Suppressed {
			out = append(out, BackendInfo{ID: sp.ID, Upstream: name, Source: upstream.SourceDiscovery,
				Address: sp.Scheme + "://" + sp.Addr(), Health: "unknown", HealthReason: sp.Suppressed,
				Membership: "suppressed", Weight: max(sp.Weight, 1), Resolution: upstream.Resolution{Kind: "none"},
				BackendDetail: BackendDetail{ConfiguredWeight: max(sp.Weight, 1)}})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Upstream != out[j].Upstream {
			return out[i].Upstream < out[j].Upstream
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func backendInfo(up string, b *upstream.Backend) BackendInfo {
	proto := "h2"
	switch b.Scheme {
	case transport.SchemeHTTP:
		proto = "http/1.1"
	case transport.SchemeH2C:
		proto = "h2c"
	}
	m := "active"
	if b.Removed() {
		m = "removed"
	}
	st, reason, till := b.Health.Snapshot()
	if !b.Health.Checked() {
		reason = "no health_check configured" // membership alone decides
	}
	info := BackendInfo{ID: b.ID, Upstream: up, Source: b.Source, Address: b.Scheme + "://" + b.Addr(), Protocol: proto,
		Health: st.String(), HealthReason: reason, Eligible: b.Eligible() && !b.Removed(), Membership: m,
		InFlight: b.InFlight(), Requests: b.Requests(), Weight: b.Weight(), Resolution: b.Resolution(), Behind: b.Stalled()}
	if !till.IsZero() {
		info.Ejected, info.EjectedUntil = true, &till
	}
	info.BackendDetail = detailOf(b) // status.go
	return info
}

// Ready reports whether every listener is serving and every discovery-fed
// upstream has synced at least once; reasons lists what is missing.
func (g *Gateway) Ready() (ready bool, reasons []string) {
	g.mu.Lock()
	n := len(g.listeners)
	g.mu.Unlock()
	if n == 0 {
		reasons = append(reasons, "no listener is serving")
	}
	for _, u := range g.Upstreams() {
		if u.Pending {
			reasons = append(reasons, "upstream "+u.Name+": discovery has not synced")
		}
	}
	return len(reasons) == 0, reasons
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// upgradesOf is what a route's Upgrades allows: DefaultUpgrades for nil.
func upgradesOf(u []string) []string {
	if u == nil {
		return tunnel.DefaultUpgrades
	}
	return u
}

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
		li := ListenerInfo{Name: name, Address: l.Address(), Protocols: l.Protocols(), InFlight: l.InFlight(), Certificates: []CertificateInfo{}}
		udp, tcp := l.Sockets()
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

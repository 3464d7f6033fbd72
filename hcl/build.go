package hcl

import (
	"fmt"
	"net"
	"strings"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Default returns the top-level defaults every load starts from: the package
// defaults (DefaultLogLevel, DefaultDrainTimeout, DefaultControlAddress,
// DefaultPrometheusRetention, DefaultDisableHostname), no Consul, no
// listeners and no upstreams. It is not a valid configuration by itself:
// Load and Parse require at least one listener.
func Default() *Config {
	return &Config{
		LogLevel:     DefaultLogLevel,
		DrainTimeout: DefaultDrainTimeout,
		Paths:        DefaultPaths(),
		Control:      Control{Address: DefaultControlAddress},
		Telemetry: Telemetry{
			PrometheusRetention: DefaultPrometheusRetention,
			DisableHostname:     DefaultDisableHostname,
		},
	}
}

// DefaultTimeouts returns the upstream timeouts used when a timeouts block or
// one of its arguments is absent (connect 2s, response_header 30s, idle 90s,
// body_idle 60s, request none).
func DefaultTimeouts() Timeouts {
	return Timeouts{
		Connect:        DefaultConnectTimeout,
		ResponseHeader: DefaultResponseHeaderTimeout,
		Idle:           DefaultIdleTimeout,
		BodyIdle:       DefaultBodyIdleTimeout,
	}
}

// logLevels are the accepted log_level values (hclog's names).
var logLevels = []string{"trace", "debug", "info", "warn", "error"}

// build turns the merged raw configuration into a Config, applying defaults
// and every semantic check. Diagnostics are appended to diags.
func build(m *rawFile, lookupEnv func(string) (string, bool), diags *hcl2.Diagnostics) *Config {
	c := Default()
	top := blk{diags: diags}

	if m.LogLevel != nil {
		lvl := strings.ToLower(top.str(m.LogLevel, DefaultLogLevel))
		if !contains(logLevels, lvl) {
			top.errorf(m.LogLevel, "", "Invalid log level", "must be one of %s; got %q.", strings.Join(logLevels, ", "), lvl)
			lvl = DefaultLogLevel
		}
		c.LogLevel = lvl
	}
	c.LogJSON = top.boolean(m.LogJSON, false)
	c.DrainTimeout = top.duration(m.DrainTimeout, DefaultDrainTimeout, 0, 0)
	c.Paths = buildPaths(top, m)

	c.Control = buildControl(top, m.Control)

	if r := m.Telemetry; r != nil {
		b := top.child("telemetry", r.DefRange)
		t := &c.Telemetry
		t.PrometheusRetention = b.duration(r.PrometheusRetention, DefaultPrometheusRetention, positive, 0)
		t.DisableHostname = b.boolean(r.DisableHostname, DefaultDisableHostname)
		t.StatsdAddress = b.sinkAddress(r.StatsdAddress, "telemetry.statsd_address")
		t.DogstatsdAddress = b.dogstatsdAddress(r.DogstatsdAddress) // dogstatsd.go
		t.DogstatsdTags = b.strList(r.DogstatsdTags, checkDogstatsdTag)
		b.dogstatsdTagsAlone(r.DogstatsdTags, t.DogstatsdTags, t.DogstatsdAddress)
		t.DogstatsdAddressRange = rangeOf(r.DogstatsdAddress)
	}

	c.Limits = buildGlobalLimits(top, m.Limits)
	c.Tracing = buildTracing(top, m.Tracing)
	c.AccessLog = buildAccessLog(top, m.AccessLog)
	c.Connect = buildConnect(top, m.Connect) // connect.go
	c.Listeners = buildListeners(top, m.Listeners)
	checkMeshListeners(top, c, m.Listeners) // connect.go
	c.Upstreams = buildUpstreams(top, m.Upstreams)
	checkConnectUpstreams(top, c, m.Upstreams) // connect_upstream.go
	checkReachable(top, c)

	switch {
	case m.Consul != nil:
		c.Consul = buildConsul(top, m.Consul, lookupEnv)
	case m.Connect != nil:
		// A mesh identity without a consul block: the local agent, with
		// the defaults (and the CONSUL_HTTP_* environment), as below.
		c.Consul = buildConsul(blk{diags: diags, def: m.Connect.DefRange}, nil, lookupEnv)
	default:
		for _, u := range m.Upstreams {
			if u.Consul != nil {
				// Consul discovery without a consul block: connect with
				// the defaults (and the CONSUL_HTTP_* environment).
				c.Consul = buildConsul(blk{diags: diags, def: u.Consul.DefRange}, nil, lookupEnv)
				break
			}
		}
	}
	if c.Consul.CatalogEnabled() {
		reserveCatalogNames(top, m.Upstreams)
	}
	fillRanges(c, m)
	return c
}

// sinkAddress converts a metrics sink address (host:port, empty = off) and
// warns when the sink is not yet supported.
func (b blk) sinkAddress(a *hcl2.Attribute, feature string) string {
	s := b.str(a, "")
	if s == "" {
		return ""
	}
	if why := checkHostPort(s, false, false); why != "" {
		b.errorf(a, "", "Invalid address", "%s.", why)
		return s
	}
	b.unsupported(feature, a.Expr.Range())
	return s
}

// checkDogstatsdTag returns why s cannot be a DogStatsD tag, or "": the
// datagram format (name:value|type|@rate|#tag,tag) gives ',', '|', '@' and
// '#' a meaning, and whitespace would end the line for some agents.
func checkDogstatsdTag(s string) string {
	switch {
	case s == "":
		return "a tag must not be empty"
	case strings.ContainsAny(s, ",|@# \t\r\n"):
		return fmt.Sprintf("tag %q must not contain whitespace, ',', '|', '@' or '#'", s)
	case strings.HasPrefix(s, ":"):
		return fmt.Sprintf("tag %q has no name before ':'", s)
	}
	return ""
}

// buildListeners converts the listener blocks: unique names, a valid
// host:port, protocols (listenerProtocols), a tls block whose cert_file and
// key_file load as a matching pair (LoadKeyPair), and no two listeners on
// the same UDP or the same TCP address.
func buildListeners(top blk, raws []*rawListener) []Listener {
	var out []Listener
	names := map[string]hcl2.Range{}
	type bound struct {
		host     string
		rng      hcl2.Range
		udp, tcp bool
	}
	ports := map[string][]bound{}
	for _, r := range raws {
		b := top.child(fmt.Sprintf("listener %q", r.Name), r.DefRange)
		prev, dup := names[r.Name]
		if dup {
			// Still checked below, to report everything at once, but
			// neither kept nor counted for address conflicts.
			b.blockErrorf("Duplicate listener", "a listener named %q is already defined at %s.", r.Name, posString(prev))
		} else {
			names[r.Name] = r.DefRange
		}
		l := Listener{Name: r.Name, Range: r.DefRange}
		l.Protocols = b.listenerProtocols(r)
		udp, tcp := contains(l.Protocols, "h3"), contains(l.Protocols, "h1") || contains(l.Protocols, "h2")

		addr, ok := b.strOK(r.Address, "")
		l.Address = addr
		switch {
		case r.Address == nil:
			b.errorf(nil, "address", "Missing listener address", "address is required, as in \"0.0.0.0:8443\".")
		case ok && dup:
			if why := checkHostPort(l.Address, true, true); why != "" {
				b.errorf(r.Address, "", "Invalid address", "%s.", why)
			}
		case ok:
			if why := checkHostPort(l.Address, true, true); why != "" {
				b.errorf(r.Address, "", "Invalid address", "%s.", why)
				break
			}
			host, port, _ := net.SplitHostPort(l.Address)
			if port == "0" {
				break
			}
			for _, other := range ports[port] {
				// UDP and TCP ports are distinct: an h3-only listener and an
				// h1/h2-only one may share a port number.
				if (other.udp && udp || other.tcp && tcp) && (other.host == host || isWildcardHost(other.host) || isWildcardHost(host)) {
					b.errorf(r.Address, "", "Duplicate listener address", "%q overlaps the listener address defined at %s.", l.Address, posString(other.rng))
					break
				}
			}
			ports[port] = append(ports[port], bound{host: host, rng: r.Address.Expr.Range(), udp: udp, tcp: tcp})
		}

		l.AltSvcPort, _ = b.integer(r.AltSvcPort, 0, 0, 65535)
		l.AltSvcMaxAge = b.duration(r.AltSvcMaxAge, DefaultAltSvcMaxAge, time.Second, 365*24*time.Hour)
		if !contains(l.Protocols, "h3") {
			for _, a := range []*hcl2.Attribute{r.AltSvcPort, r.AltSvcMaxAge} {
				if a != nil {
					b.add(hcl2.DiagWarning, b.subject(a), "No effect", b.field(a.Name)+": Alt-Svc advertises HTTP/3, which this listener does not serve (protocols has no \"h3\").")
				}
			}
		}
		l.EarlyData = b.boolean(r.EarlyData, false)
		if l.EarlyData && !contains(l.Protocols, "h3") {
			b.add(hcl2.DiagWarning, b.subject(r.EarlyData), "No effect", b.field(r.EarlyData.Name)+": early data is 0-RTT on QUIC, and this listener does not serve HTTP/3 (protocols has no \"h3\"); Go's TLS server over TCP does not accept early data.")
		}

		l.Limits = buildListenerLimits(b, r.Limits)
		l.RateLimit = buildRateLimit(b, r.RateLimit)                       // ratelimit.go
		l.ProxyProtocol = buildProxyProtocol(b, r.ProxyProtocol, tcp, udp) // clientaddr.go
		l.ForwardedHeaders = buildForwardedHeaders(b, r.ForwardedHeaders)
		l.IPAllow, l.IPDeny = b.cidrList(r.IPAllow), b.cidrList(r.IPDeny)

		l.Connect = b.boolean(r.Connect, false)
		if r.Connect != nil {
			l.ConnectRange = r.Connect.Expr.Range()
		}
		switch {
		case l.Connect:
			// TLS from the Connect leaf; checkMeshListeners checks the rest.
		case r.TLS == nil:
			b.blockErrorf("Missing TLS", "a listener needs a tls block with cert_file and key_file (HTTP/3 always uses TLS), or connect = true (a service mesh listener).")
		default:
			l.TLS = buildListenerTLS(b.child("tls", r.TLS.DefRange), r.TLS) // listenertls.go
		}
		if !dup {
			out = append(out, l)
		}
	}
	return out
}

// isWildcardHost reports whether a listen host means every interface.
func isWildcardHost(h string) bool {
	return h == "" || h == "0.0.0.0" || h == "::"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

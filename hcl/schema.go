package hcl

import (
	"fmt"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// This file holds the raw gohcl schema: one struct per block type of the
// configuration language documented in interface.md. gohcl uses these structs
// to reject unknown blocks and arguments and missing labels. Singleton blocks are decoded as slices and collapsed to
// one (reporting extras) so that a duplicate does not hide the first block's
// content from validation. Every argument is captured as a *hcl2.Attribute (nil when
// absent) so that the builder in build.go can tell "absent" from "zero",
// convert the value itself and point every diagnostic at the exact source
// range of the offending value. All arguments are optional at this level;
// required ones are checked by the builder so its messages name the full field
// path.

// rawFile is the body of one configuration file.
type rawFile struct {
	LogLevel     *hcl2.Attribute `hcl:"log_level,optional"`
	LogJSON      *hcl2.Attribute `hcl:"log_json,optional"`
	DrainTimeout *hcl2.Attribute `hcl:"drain_timeout,optional"`

	NormalizePath  *hcl2.Attribute `hcl:"normalize_path,optional"` // paths.go
	MergeSlashes   *hcl2.Attribute `hcl:"merge_slashes,optional"`
	EscapedSlashes *hcl2.Attribute `hcl:"escaped_slashes,optional"`

	Consuls    []*rawConsul       `hcl:"consul,block"`
	Controls   []*rawControl      `hcl:"control,block"`
	Telemetrys []*rawTelemetry    `hcl:"telemetry,block"`
	Listeners  []*rawListener     `hcl:"listener,block"`
	Upstreams  []*rawUpstream     `hcl:"upstream,block"`
	Limitss    []*rawGlobalLimits `hcl:"limits,block"`     // limits.go
	Tracings   []*rawTracing      `hcl:"tracing,block"`    // tracing.go
	AccessLogs []*rawAccessLog    `hcl:"access_log,block"` // accesslog.go
	Connects   []*rawConnect      `hcl:"connect,block"`    // connect.go

	// Set by collapse (one file) or by the merger (all files).
	Consul    *rawConsul
	Control   *rawControl
	Telemetry *rawTelemetry
	Limits    *rawGlobalLimits
	Tracing   *rawTracing
	AccessLog *rawAccessLog
	Connect   *rawConnect
}

// rawConsul is the top-level consul block.
type rawConsul struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Address      *hcl2.Attribute `hcl:"address,optional"`
	Scheme       *hcl2.Attribute `hcl:"scheme,optional"`
	Token        *hcl2.Attribute `hcl:"token,optional"`
	TokenFile    *hcl2.Attribute `hcl:"token_file,optional"`
	Datacenter   *hcl2.Attribute `hcl:"datacenter,optional"`
	Wait         *hcl2.Attribute `hcl:"wait,optional"`
	Stale        *hcl2.Attribute `hcl:"stale,optional"`
	MaxStaleness *hcl2.Attribute `hcl:"max_staleness,optional"`
	ResyncGrace  *hcl2.Attribute `hcl:"resync_grace,optional"`

	TLSs      []*rawTLS      `hcl:"tls,block"`
	Registers []*rawRegister `hcl:"register,block"`
	Catalogs  []*rawCatalog  `hcl:"catalog,block"`

	TLS      *rawTLS      // set by collapse
	Register *rawRegister // set by collapse
	Catalog  *rawCatalog  // set by collapse
}

// rawTLS is a client-side tls block (consul.tls and upstream.tls).
type rawTLS struct {
	DefRange hcl2.Range `hcl:",def_range"`

	CAFile             *hcl2.Attribute `hcl:"ca_file,optional"`
	CertFile           *hcl2.Attribute `hcl:"cert_file,optional"`
	KeyFile            *hcl2.Attribute `hcl:"key_file,optional"`
	ServerName         *hcl2.Attribute `hcl:"server_name,optional"`
	InsecureSkipVerify *hcl2.Attribute `hcl:"insecure_skip_verify,optional"`
}

// rawListenerTLS is the server-side tls block of a listener: the default
// certificate, more certificates chosen by SNI, the client policy.
type rawListenerTLS struct {
	DefRange hcl2.Range `hcl:",def_range"`

	CertFile          *hcl2.Attribute `hcl:"cert_file,optional"`
	KeyFile           *hcl2.Attribute `hcl:"key_file,optional"`
	ClientAuth        *hcl2.Attribute `hcl:"client_auth,optional"`
	ClientCAFile      *hcl2.Attribute `hcl:"client_ca_file,optional"`
	ForwardClientCert *hcl2.Attribute `hcl:"forward_client_cert,optional"`

	Certificates []*rawCertificate `hcl:"certificate,block"`
}

// rawCertificate is listener.tls.certificate (repeatable).
type rawCertificate struct {
	DefRange hcl2.Range `hcl:",def_range"`

	CertFile *hcl2.Attribute `hcl:"cert_file,optional"`
	KeyFile  *hcl2.Attribute `hcl:"key_file,optional"`
}

// rawRegister is consul.register.
type rawRegister struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Service *hcl2.Attribute `hcl:"service,optional"`
	Tags    *hcl2.Attribute `hcl:"tags,optional"`
	Address *hcl2.Attribute `hcl:"address,optional"`
}

// rawCatalog is consul.catalog.
type rawCatalog struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Enabled       *hcl2.Attribute `hcl:"enabled,optional"`
	TagPrefix     *hcl2.Attribute `hcl:"tag_prefix,optional"`
	DefaultScheme *hcl2.Attribute `hcl:"default_scheme,optional"`
	Filter        *hcl2.Attribute `hcl:"filter,optional"`
}

// rawControl is the top-level control block.
type rawControl struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Address     *hcl2.Attribute `hcl:"address,optional"`
	TokenFile   *hcl2.Attribute `hcl:"token_file,optional"`
	EnableDebug *hcl2.Attribute `hcl:"enable_debug,optional"`

	AllowUnauthenticated *hcl2.Attribute `hcl:"allow_unauthenticated,optional"`
}

// rawTelemetry is the top-level telemetry block.
type rawTelemetry struct {
	DefRange hcl2.Range `hcl:",def_range"`

	PrometheusRetention *hcl2.Attribute `hcl:"prometheus_retention,optional"`
	StatsdAddress       *hcl2.Attribute `hcl:"statsd_address,optional"`
	DogstatsdAddress    *hcl2.Attribute `hcl:"dogstatsd_address,optional"`
	DogstatsdTags       *hcl2.Attribute `hcl:"dogstatsd_tags,optional"`
	DisableHostname     *hcl2.Attribute `hcl:"disable_hostname,optional"`
}

// rawListener is a listener "NAME" block.
type rawListener struct {
	Name     string     `hcl:"name,label"`
	DefRange hcl2.Range `hcl:",def_range"`

	Address      *hcl2.Attribute `hcl:"address,optional"`
	Protocol     *hcl2.Attribute `hcl:"protocol,optional"`
	Protocols    *hcl2.Attribute `hcl:"protocols,optional"`
	AltSvcPort   *hcl2.Attribute `hcl:"alt_svc_port,optional"`
	AltSvcMaxAge *hcl2.Attribute `hcl:"alt_svc_max_age,optional"`
	EarlyData    *hcl2.Attribute `hcl:"early_data,optional"`
	Connect      *hcl2.Attribute `hcl:"connect,optional"` // connect.go

	TLSs       []*rawListenerTLS    `hcl:"tls,block"`
	Limitss    []*rawListenerLimits `hcl:"limits,block"`     // limits.go
	RateLimits []*rawRateLimit      `hcl:"rate_limit,block"` // ratelimit.go

	TLS       *rawListenerTLS    // set by collapse
	Limits    *rawListenerLimits // set by collapse
	RateLimit *rawRateLimit      // set by collapse

	// Who is calling (clientaddr.go).
	IPAllow           *hcl2.Attribute        `hcl:"ip_allow,optional"`
	IPDeny            *hcl2.Attribute        `hcl:"ip_deny,optional"`
	ProxyProtocols    []*rawProxyProtocol    `hcl:"proxy_protocol,block"`
	ForwardedHeaderss []*rawForwardedHeaders `hcl:"forwarded_headers,block"`
	ProxyProtocol     *rawProxyProtocol      // set by collapse
	ForwardedHeaders  *rawForwardedHeaders   // set by collapse
}

// rawUpstream is an upstream "NAME" block.
type rawUpstream struct {
	Name     string     `hcl:"name,label"`
	DefRange hcl2.Range `hcl:",def_range"`

	LoadBalancing *hcl2.Attribute `hcl:"load_balancing,optional"`
	HashOn        *hcl2.Attribute `hcl:"hash_on,optional"`
	SlowStart     *hcl2.Attribute `hcl:"slow_start,optional"`

	Routes            []*rawRoute            `hcl:"route,block"`
	Backends          []*rawBackend          `hcl:"backend,block"`
	Consuls           []*rawUpstreamConsul   `hcl:"consul,block"`
	HealthChecks      []*rawHealthCheck      `hcl:"health_check,block"`
	OutlierDetections []*rawOutlierDetection `hcl:"outlier_detection,block"`
	TLSs              []*rawTLS              `hcl:"tls,block"`
	Timeoutss         []*rawTimeouts         `hcl:"timeouts,block"`
	Limitss           []*rawUpstreamLimits   `hcl:"limits,block"`           // limits.go
	RateLimits        []*rawRateLimit        `hcl:"rate_limit,block"`       // ratelimit.go
	Retrys            []*rawRetry            `hcl:"retry,block"`            // retry.go
	Hedges            []*rawHedge            `hcl:"hedge,block"`            // retry.go
	Compresses        []*rawCompress         `hcl:"compress,block"`         // edge.go
	CORSs             []*rawCORS             `hcl:"cors,block"`             // edge.go
	RequestHeaders    []*rawHeaderRules      `hcl:"request_headers,block"`  // routing.go
	ResponseHeaders   []*rawHeaderRules      `hcl:"response_headers,block"` // routing.go

	// Set by collapse.
	Consul           *rawUpstreamConsul
	HealthCheck      *rawHealthCheck
	OutlierDetection *rawOutlierDetection
	TLS              *rawTLS
	Timeouts         *rawTimeouts
	Limits           *rawUpstreamLimits
	RateLimit        *rawRateLimit
	Retry            *rawRetry
	Hedge            *rawHedge
}

// rawRoute is upstream.route.
type rawRoute struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Host       *hcl2.Attribute `hcl:"host,optional"`
	PathPrefix *hcl2.Attribute `hcl:"path_prefix,optional"`
	Path       *hcl2.Attribute `hcl:"path,optional"`       // routing.go
	PathRegex  *hcl2.Attribute `hcl:"path_regex,optional"` // routing.go
	Methods    *hcl2.Attribute `hcl:"methods,optional"`
	Upgrades   *hcl2.Attribute `hcl:"upgrades,optional"`

	APIKeyss     []*rawAPIKeys     `hcl:"api_keys,block"`     // auth.go
	BasicAuths   []*rawBasicAuth   `hcl:"basic_auth,block"`   // auth.go
	JWTs         []*rawJWT         `hcl:"jwt,block"`          // jwt.go
	ForwardAuths []*rawForwardAuth `hcl:"forward_auth,block"` // auth.go
	IPAllow      *hcl2.Attribute   `hcl:"ip_allow,optional"`  // clientaddr.go
	IPDeny       *hcl2.Attribute   `hcl:"ip_deny,optional"`
	Compresses   []*rawCompress    `hcl:"compress,block"` // edge.go
	CORSs        []*rawCORS        `hcl:"cors,block"`     // edge.go

	StripPrefix     *hcl2.Attribute   `hcl:"strip_prefix,optional"`   // routing.go
	PrefixRewrite   *hcl2.Attribute   `hcl:"prefix_rewrite,optional"` // routing.go
	RequestHeaders  []*rawHeaderRules `hcl:"request_headers,block"`   // routing.go
	ResponseHeaders []*rawHeaderRules `hcl:"response_headers,block"`  // routing.go
	Redirects       []*rawRedirect    `hcl:"redirect,block"`          // routing.go
	Timeoutss       []*rawTimeouts    `hcl:"timeouts,block"`          // route_policies.go
	Retrys          []*rawRetry       `hcl:"retry,block"`             // route_policies.go
	RateLimits      []*rawRateLimit   `hcl:"rate_limit,block"`        // route_policies.go
	Splits          []*rawSplit       `hcl:"split,block"`             // splits.go
	Sticky          *hcl2.Attribute   `hcl:"sticky,optional"`         // splits.go
}

// rawBackend is upstream.backend "NAME".
type rawBackend struct {
	Name     string     `hcl:"name,label"`
	DefRange hcl2.Range `hcl:",def_range"`

	Address *hcl2.Attribute `hcl:"address,optional"`
	Weight  *hcl2.Attribute `hcl:"weight,optional"`
}

// rawUpstreamConsul is upstream.consul.
type rawUpstreamConsul struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Service    *hcl2.Attribute `hcl:"service,optional"`
	Tags       *hcl2.Attribute `hcl:"tags,optional"`
	Health     *hcl2.Attribute `hcl:"health,optional"`
	Datacenter *hcl2.Attribute `hcl:"datacenter,optional"`
	Namespace  *hcl2.Attribute `hcl:"namespace,optional"`
	Partition  *hcl2.Attribute `hcl:"partition,optional"`
	Scheme     *hcl2.Attribute `hcl:"scheme,optional"`
	Connect    *hcl2.Attribute `hcl:"connect,optional"`  // connect_upstream.go
	Protocol   *hcl2.Attribute `hcl:"protocol,optional"` // connect_upstream.go
}

// rawHealthCheck is upstream.health_check.
type rawHealthCheck struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Path               *hcl2.Attribute `hcl:"path,optional"`
	Interval           *hcl2.Attribute `hcl:"interval,optional"`
	Timeout            *hcl2.Attribute `hcl:"timeout,optional"`
	HealthyThreshold   *hcl2.Attribute `hcl:"healthy_threshold,optional"`
	UnhealthyThreshold *hcl2.Attribute `hcl:"unhealthy_threshold,optional"`
	UnknownIsHealthy   *hcl2.Attribute `hcl:"unknown_is_healthy,optional"`
	GRPC               *hcl2.Attribute `hcl:"grpc,optional"`
	GRPCService        *hcl2.Attribute `hcl:"grpc_service,optional"`
}

// rawOutlierDetection is upstream.outlier_detection.
type rawOutlierDetection struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Enabled             *hcl2.Attribute `hcl:"enabled,optional"`
	ConsecutiveFailures *hcl2.Attribute `hcl:"consecutive_failures,optional"`
	BaseEjectionTime    *hcl2.Attribute `hcl:"base_ejection_time,optional"`
	MaxEjectionPercent  *hcl2.Attribute `hcl:"max_ejection_percent,optional"`
}

// rawTimeouts is upstream.timeouts.
type rawTimeouts struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Connect        *hcl2.Attribute `hcl:"connect,optional"`
	ResponseHeader *hcl2.Attribute `hcl:"response_header,optional"`
	Idle           *hcl2.Attribute `hcl:"idle,optional"`
	BodyIdle       *hcl2.Attribute `hcl:"body_idle,optional"`
	Request        *hcl2.Attribute `hcl:"request,optional"`
}

func (r *rawConsul) defRange() hcl2.Range           { return r.DefRange }
func (r *rawTLS) defRange() hcl2.Range              { return r.DefRange }
func (r *rawListenerTLS) defRange() hcl2.Range      { return r.DefRange }
func (r *rawRegister) defRange() hcl2.Range         { return r.DefRange }
func (r *rawCatalog) defRange() hcl2.Range          { return r.DefRange }
func (r *rawControl) defRange() hcl2.Range          { return r.DefRange }
func (r *rawTelemetry) defRange() hcl2.Range        { return r.DefRange }
func (r *rawUpstreamConsul) defRange() hcl2.Range   { return r.DefRange }
func (r *rawHealthCheck) defRange() hcl2.Range      { return r.DefRange }
func (r *rawOutlierDetection) defRange() hcl2.Range { return r.DefRange }
func (r *rawTimeouts) defRange() hcl2.Range         { return r.DefRange }

// collapse picks the single consul, control and telemetry blocks of one
// decoded file and of every block below, reporting duplicates into diags.
func (f *rawFile) collapse(diags *hcl2.Diagnostics) {
	f.Consul = one(f.Consuls, "", "consul", diags)
	f.Control = one(f.Controls, "", "control", diags)
	f.Telemetry = one(f.Telemetrys, "", "telemetry", diags)
	f.Limits = one(f.Limitss, "", "limits", diags)
	f.Tracing = one(f.Tracings, "", "tracing", diags)
	f.AccessLog = one(f.AccessLogs, "", "access_log", diags)
	f.Connect = one(f.Connects, "", "connect", diags)
	if c := f.Consul; c != nil {
		c.TLS = one(c.TLSs, "consul", "tls", diags)
		c.Register = one(c.Registers, "consul", "register", diags)
		c.Catalog = one(c.Catalogs, "consul", "catalog", diags)
	}
	for _, l := range f.Listeners {
		l.TLS = one(l.TLSs, fmt.Sprintf("listener %q", l.Name), "tls", diags)
		l.Limits = one(l.Limitss, fmt.Sprintf("listener %q", l.Name), "limits", diags)
		l.RateLimit = one(l.RateLimits, fmt.Sprintf("listener %q", l.Name), "rate_limit", diags)
		l.ProxyProtocol = one(l.ProxyProtocols, fmt.Sprintf("listener %q", l.Name), "proxy_protocol", diags)
		l.ForwardedHeaders = one(l.ForwardedHeaderss, fmt.Sprintf("listener %q", l.Name), "forwarded_headers", diags)
	}
	for _, u := range f.Upstreams {
		path := fmt.Sprintf("upstream %q", u.Name)
		u.Consul = one(u.Consuls, path, "consul", diags)
		u.HealthCheck = one(u.HealthChecks, path, "health_check", diags)
		u.OutlierDetection = one(u.OutlierDetections, path, "outlier_detection", diags)
		u.TLS = one(u.TLSs, path, "tls", diags)
		u.Timeouts = one(u.Timeoutss, path, "timeouts", diags)
		u.Limits = one(u.Limitss, path, "limits", diags)
		u.RateLimit = one(u.RateLimits, path, "rate_limit", diags)
		u.Retry = one(u.Retrys, path, "retry", diags)
		u.Hedge = one(u.Hedges, path, "hedge", diags)
	}
}

// one returns the first of blocks (nil when none) and reports every other one
// as a duplicate; path names the enclosing block for the message.
func one[T interface{ defRange() hcl2.Range }](blocks []T, path, name string, diags *hcl2.Diagnostics) T {
	var first T
	if len(blocks) == 0 {
		return first
	}
	first = blocks[0]
	field := name
	if path != "" {
		field = path + " " + name
	}
	for _, extra := range blocks[1:] {
		r := extra.defRange()
		*diags = append(*diags, &hcl2.Diagnostic{
			Severity: hcl2.DiagError,
			Summary:  fmt.Sprintf("Duplicate %s block", name),
			Detail:   fmt.Sprintf("%s: only one %s block is allowed here; the first is at %s.", field, name, posString(first.defRange())),
			Subject:  &r,
		})
	}
	return first
}

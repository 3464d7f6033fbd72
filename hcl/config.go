// Package hcl decodes and validates impulse-agent configuration files.
//
// The language is the HCL schema documented in interface.md ("Configuration
// (HCL)"). Files are parsed with hashicorp/hcl/v2, decoded with gohcl into raw
// structs (schema.go), merged across files the way Consul merges its config
// directories (load.go), and converted into the typed, defaulted and validated
// Config below (build.go, consul.go, catalog.go, upstream.go; value checks in fields.go and
// address.go). Every problem is an hcl/v2 diagnostic
// whose Subject is the source range of the offending value or block, so
// callers can print file:line:column (see FormatDiagnostics and
// WriteDiagnosticLines).
//
// A setting that is accepted by the schema but not yet implemented by the
// gateway (the upstream limits listed in unsupported.go) produces a "Not yet
// supported" warning.
package hcl

import (
	"slices"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Defaults applied to anything the configuration leaves out;
// testdata/good/full.hcl writes them all out (TestFullExample checks it).
const (
	// DefaultLogLevel is the log level when log_level is absent.
	DefaultLogLevel = "info"
	// DefaultDrainTimeout is the graceful shutdown budget when drain_timeout is absent.
	DefaultDrainTimeout = 30 * time.Second

	// DefaultConsulAddress is the Consul HTTP address when neither consul.address
	// nor CONSUL_HTTP_ADDR is set.
	DefaultConsulAddress = "127.0.0.1:8500"
	// DefaultConsulScheme is the Consul scheme when neither consul.scheme, an
	// address prefix, nor CONSUL_HTTP_SSL says otherwise.
	DefaultConsulScheme = "http"
	// DefaultConsulWait is the blocking-query wait when consul.wait is absent.
	DefaultConsulWait = 5 * time.Minute
	// MinConsulWait is the smallest accepted consul.wait (inclusive).
	MinConsulWait = time.Second
	// MaxConsulWait is the largest accepted consul.wait; Consul caps waits at 10m.
	MaxConsulWait = 10 * time.Minute
	// DefaultResyncGrace is consul.resync_grace when absent.
	DefaultResyncGrace = 30 * time.Second
	// DefaultRegisterService is consul.register.service when absent.
	DefaultRegisterService = "impulse-agent"
	// DefaultCatalogTagPrefix is consul.catalog.tag_prefix when absent.
	DefaultCatalogTagPrefix = "impulse"
	// DefaultCatalogScheme is consul.catalog.default_scheme when absent:
	// services registered for the catalog mode are usually plain HTTP/1.1
	// applications.
	DefaultCatalogScheme = "http"
	// CatalogUpstreamPrefix starts the name of every upstream made from a
	// Consul service by the catalog mode ("consul:<service>"). Upstream
	// blocks may not use it while consul.catalog is enabled.
	CatalogUpstreamPrefix = "consul:"

	// DefaultControlAddress is control.address when absent.
	DefaultControlAddress = "127.0.0.1:9901"

	// DefaultPrometheusRetention is telemetry.prometheus_retention when absent:
	// 24h, Vault's default for prometheus_retention_time. go-metrics drops a
	// series not updated for that long; a minute lost gauges updated once per
	// blocking query (consul.wait, 5m by default) and counters of rare events.
	DefaultPrometheusRetention = 24 * time.Hour
	// DefaultDisableHostname is telemetry.disable_hostname when absent.
	DefaultDisableHostname = true

	// DefaultAltSvcMaxAge is listener.alt_svc_max_age when absent.
	DefaultAltSvcMaxAge = 24 * time.Hour
	// DefaultClientAuth is listener.tls.client_auth when absent.
	DefaultClientAuth = "none"

	// DefaultLoadBalancing is upstream.load_balancing when absent.
	DefaultLoadBalancing = "round_robin"
	// DefaultPathPrefix is route.path_prefix when absent.
	DefaultPathPrefix = "/"
	// DefaultWeight is backend.weight when absent. Weights are 1..MaxWeight.
	DefaultWeight = 100
	// MaxWeight is the largest backend.weight. Slow start multiplies a weight
	// by up to slow_start's maximum (1h) in nanoseconds in int64 arithmetic,
	// which stays exact below about 2.5 million; a million is far more
	// resolution than any split needs.
	MaxWeight = 1_000_000
	// DefaultHealth is upstream.consul.health when absent.
	DefaultHealth = "passing"
	// DefaultDiscoveryScheme is upstream.consul.scheme when absent: the
	// rule that a schemeless backend address is HTTP/2 over TLS.
	DefaultDiscoveryScheme = "https"

	// DefaultHealthCheckPath is health_check.path when absent.
	DefaultHealthCheckPath = "/health"
	// DefaultHealthCheckInterval is health_check.interval when absent.
	DefaultHealthCheckInterval = 5 * time.Second
	// DefaultHealthCheckTimeout is health_check.timeout when absent.
	DefaultHealthCheckTimeout = time.Second
	// DefaultHealthyThreshold is health_check.healthy_threshold when absent.
	DefaultHealthyThreshold = 2
	// DefaultUnhealthyThreshold is health_check.unhealthy_threshold when absent.
	DefaultUnhealthyThreshold = 3

	// DefaultConsecutiveFailures is outlier_detection.consecutive_failures when absent.
	DefaultConsecutiveFailures = 5
	// DefaultBaseEjectionTime is outlier_detection.base_ejection_time when absent.
	DefaultBaseEjectionTime = 10 * time.Second
	// DefaultMaxEjectionPercent is outlier_detection.max_ejection_percent when absent.
	DefaultMaxEjectionPercent = 100

	// DefaultConnectTimeout is timeouts.connect when absent.
	DefaultConnectTimeout = 2 * time.Second
	// DefaultResponseHeaderTimeout is timeouts.response_header when absent.
	DefaultResponseHeaderTimeout = 30 * time.Second
	// DefaultIdleTimeout is timeouts.idle when absent.
	DefaultIdleTimeout = 90 * time.Second
	// DefaultBodyIdleTimeout is timeouts.body_idle when absent.
	DefaultBodyIdleTimeout = 60 * time.Second
)

// Config is a decoded, defaulted and validated configuration. It is only
// returned when there are no error diagnostics, and is never mutated by this
// package afterwards.
type Config struct {
	// LogLevel is one of trace, debug, info, warn, error (lower-cased; default info).
	LogLevel string
	// LogJSON selects JSON log output (default false).
	LogJSON bool
	// DrainTimeout is the graceful shutdown budget for in-flight requests
	// (default 30s; >= 0).
	DrainTimeout time.Duration
	// Paths are the path normalisation settings (always present, defaulted).
	Paths Paths

	// Consul is the Consul agent connection. It is nil when no file has a
	// consul block and no upstream uses Consul discovery; when an upstream has
	// a consul block but no top-level consul block exists, it holds the
	// defaults (including the CONSUL_HTTP_* environment).
	Consul *Consul
	// Control is the control API (always present, defaulted).
	Control Control
	// Telemetry configures metric sinks (always present, defaulted).
	Telemetry Telemetry
	// Limits is the top-level limits block (zero when absent: no limit).
	Limits GlobalLimits
	// Tracing is the tracing block (nil when absent: tracing off).
	Tracing *Tracing
	// AccessLog is the top-level access_log block (nil when absent: no
	// access log).
	AccessLog *AccessLog
	// Connect is the connect block: the Consul service mesh identity (nil
	// when absent: not in the mesh). Parsed, not yet used.
	Connect *Connect
	// Listeners in source order (files in load order, blocks in file order).
	Listeners []Listener
	// Upstreams in source order.
	Upstreams []Upstream

	// Files are the configuration files that were read, in load order.
	Files []string
	// Warnings are the warning diagnostics (also returned by Load/Parse),
	// e.g. "Not yet supported" features.
	Warnings hcl2.Diagnostics
}

// Consul is the top-level consul block: how the agent reaches Consul.
type Consul struct {
	// Address is host:port of the Consul HTTP API, without scheme. Default:
	// CONSUL_HTTP_ADDR, then 127.0.0.1:8500. An "http://" or "https://" prefix
	// in the configured value (or the environment) sets Scheme and is removed.
	Address string
	// Scheme is "http" or "https". Default: from the address prefix, then
	// CONSUL_HTTP_SSL, then "http".
	Scheme string
	// Token is the ACL token given inline (`token`) or by CONSUL_HTTP_TOKEN
	// when neither token nor token_file is configured. Mutually exclusive with
	// TokenFile in the file.
	Token string
	// TokenFile is a file holding the ACL token (`token_file`, default
	// CONSUL_HTTP_TOKEN_FILE); it must exist when set in the file.
	TokenFile string
	// TokenFileRange is the source range of token_file (zero when it
	// comes from the environment), for errors found when reading it.
	TokenFileRange hcl2.Range
	// Datacenter for queries; empty means the agent's own.
	Datacenter string
	// Wait is the blocking-query wait time, 1s..10m (default 5m).
	Wait time.Duration
	// Stale allows stale reads.
	Stale bool
	// MaxStaleness is how long a watched service may go without a successful
	// query before /v1/ready reports discovery as degraded (traffic keeps
	// flowing on the last known instances). Default 2 × Wait; at least
	// Wait + Wait/16 + 5s, at most 24h.
	MaxStaleness time.Duration
	// ResyncGrace is how long after a Consul outage or index reset an answer
	// emptying a watched set is held back (the last set kept) while Consul
	// may be refilling lost state. Default 30s, 0 disables, at most 10m.
	ResyncGrace time.Duration
	// TLS configures HTTPS to Consul; nil when the block is absent.
	TLS *TLS
	// Register is the gateway's self-registration; nil when absent.
	Register *Register
	// Catalog is the catalog mode (routes declared in Consul); nil when
	// the block is absent. Use CatalogEnabled to test for it.
	Catalog *Catalog
}

// CatalogEnabled reports whether the catalog mode is on: a consul.catalog
// block without enabled = false.
func (c *Consul) CatalogEnabled() bool {
	return c != nil && c.Catalog != nil && c.Catalog.Enabled
}

// Catalog is consul.catalog: services that opt in through tags get an
// upstream and routes without any upstream block.
type Catalog struct {
	// Enabled turns the mode on (default true when the block is present).
	Enabled bool
	// TagPrefix starts the tags that opt a service in and declare its routes:
	// "<prefix>.route=HOST/PATH", "<prefix>.enable=true",
	// "<prefix>.scheme=http|https|h2c", "<prefix>.lb=POLICY" (default
	// "impulse"). Letters, digits, "-", "_" and inner "."; no "=".
	TagPrefix string
	// DefaultScheme is how instances of catalog services are reached when
	// neither a "<prefix>.scheme" tag nor the ServiceMeta "impulse-scheme"
	// says otherwise: "http" (the default), "https" or "h2c".
	DefaultScheme string
	// Filter is a Consul filter expression passed to /v1/catalog/services
	// (empty: none). Consul checks its syntax, not this package.
	Filter string
}

// Register is consul.register: self-registration of this gateway.
type Register struct {
	// Service name (default "impulse-agent").
	Service string
	// Tags added to the registration.
	Tags []string
	// Address advertised; empty means the listener address.
	Address string
}

// Control is the control API block.
type Control struct {
	// Address is host:port of the HTTP/1.1 control API (default 127.0.0.1:9901).
	Address string
	// TokenFile, when set, holds the bearer token every endpoint but
	// /v1/health requires. It must exist.
	TokenFile string
	// EnableDebug serves Go's profiler under /debug/pprof/ (as Consul's
	// enable_debug); off by default.
	EnableDebug bool
	// AllowUnauthenticated permits a non-loopback Address without
	// TokenFile (default false: such a configuration is an error).
	AllowUnauthenticated bool
	// AddressRange and TokenFileRange are the source ranges of address and
	// token_file (zero when absent), for errors found when binding or
	// reading them.
	AddressRange, TokenFileRange hcl2.Range
}

// Telemetry is the telemetry block.
type Telemetry struct {
	// PrometheusRetention is how long the Prometheus endpoint keeps a series
	// after its last update (default 24h; > 0).
	PrometheusRetention time.Duration
	// StatsdAddress is host:port of a statsd sink (UDP).
	StatsdAddress string
	// DogstatsdAddress is host:port of a DogStatsD agent (UDP, Datadog's
	// statsd with tags); "" = off. Metric labels are sent as tags.
	DogstatsdAddress string
	// DogstatsdTags are tags added to every DogStatsD metric ("env:prod",
	// "team"), as Consul's telemetry.dogstatsd_tags; each is "key" or
	// "key:value" without whitespace, ',', '|', '@' or '#'. Nil when absent.
	DogstatsdTags []string
	// DogstatsdAddressRange is the source range of dogstatsd_address (zero
	// when absent), for an address that does not resolve at start.
	DogstatsdAddressRange hcl2.Range
	// DisableHostname, when false, adds the host as a "host" tag to
	// DogStatsD metrics (default true: no host tag). No sink ever puts the
	// host in a metric name; Prometheus has the scrape's instance label.
	DisableHostname bool
}

// Equal reports whether t and o configure the same sinks (source ranges
// aside).
func (t Telemetry) Equal(o Telemetry) bool {
	return t.PrometheusRetention == o.PrometheusRetention && t.StatsdAddress == o.StatsdAddress &&
		t.DogstatsdAddress == o.DogstatsdAddress && slices.Equal(t.DogstatsdTags, o.DogstatsdTags) &&
		t.DisableHostname == o.DisableHostname
}

// DefaultListenerProtocols is listener.protocols when absent: HTTP/1.1 and
// HTTP/2 over TLS on TCP, HTTP/3 on UDP, on the same port.
var DefaultListenerProtocols = []string{"h1", "h2", "h3"}

// Listener is a listener "NAME" block: an HTTP/3 (QUIC, UDP) and HTTP/1.1 +
// HTTP/2 (TLS, TCP) ingress on one address.
type Listener struct {
	// Name is the block label, unique among listeners.
	Name string
	// Address is host:port to bind (UDP for h3, TCP for h1 and h2, the same
	// port). The host may be empty (all interfaces); port 0 picks a free
	// port.
	Address string
	// Protocols are the protocols served, each "h1", "h2" or "h3", no
	// duplicates, not empty (default DefaultListenerProtocols). The
	// deprecated protocol = "http3" means ["h3"] (with a warning).
	Protocols []string
	// AltSvcPort is the port advertised in Alt-Svc over TCP, 1..65535; 0
	// (absent) means the listener's own port.
	AltSvcPort int
	// AltSvcMaxAge is the Alt-Svc max age (default DefaultAltSvcMaxAge;
	// whole seconds, 1s..365 days).
	AltSvcMaxAge time.Duration
	// EarlyData accepts TLS 1.3 early data (0-RTT, RFC 8470) on the QUIC
	// side; default false. It has no effect on TCP.
	EarlyData bool
	// TLS holds the server certificates and the client-certificate policy
	// (zero for a Connect listener).
	TLS ListenerTLS
	// Connect makes this a Consul Connect (service mesh) listener
	// (`connect`, default false): TLS from the leaf certificate of the
	// top-level connect block's service, client certificates required and
	// verified against the Connect CA roots, intentions enforced at the
	// handshake (L4) and per request (L7). It has no tls block.
	// ConnectRange is the argument's value range (zero when absent).
	Connect      bool
	ConnectRange hcl2.Range
	// Range is the listener block's definition range (`listener "NAME"`).
	Range hcl2.Range
	// AddressRange is the source range of address, for bind errors.
	AddressRange hcl2.Range
	// Limits is the limits block, defaulted (DefaultListenerLimits).
	Limits ListenerLimits
	// RateLimit is the rate_limit block, applied to every request routed
	// through the listener before the upstream's; nil when absent.
	RateLimit *RateLimit

	// ProxyProtocol is the proxy_protocol block (nil: absent);
	// ForwardedHeaders the forwarded_headers block (nil: absent). Both
	// settle the client address (README "Client address").
	ProxyProtocol    *ProxyProtocol
	ForwardedHeaders *ForwardedHeaders
	// IPAllow and IPDeny are CIDR prefixes applied to the client address
	// before routing (403 ip_denied; deny wins; an empty allow list allows
	// all). Empty when absent.
	IPAllow, IPDeny []string
}

// Upstream is an upstream "NAME" block: routes plus the backends they go to.
type Upstream struct {
	// Name is the block label, unique among upstreams.
	Name string
	// LoadBalancing is round_robin (default), random, least_request,
	// consistent_hash or ewma.
	LoadBalancing string
	// HashOn is the consistent_hash key: header:NAME, cookie:NAME, query:NAME,
	// path, authority or client_ip. Required with consistent_hash, rejected
	// otherwise.
	HashOn string
	// SlowStart ramps a new or recovered backend's weight linearly from 1
	// to its full weight over this duration (0 = off; at most 1h).
	SlowStart time.Duration
	// Routes has at least one route.
	Routes []Route
	// Compress and CORS are the upstream's compress and cors blocks (nil:
	// absent): the default of each of its routes that has none of its own
	// (already copied into Routes; edge.go).
	Compress *Compress
	CORS     *CORS
	// RequestHeaders and ResponseHeaders are the upstream's header rules
	// (nil: absent), the default of its routes without their own (already
	// copied into Routes; routing.go).
	RequestHeaders, ResponseHeaders *HeaderRules
	// Backends are the static backends (may be empty when Consul is set).
	Backends []Backend
	// Consul configures discovered backends; nil when absent. At least one of
	// Backends and Consul is present, unless every route is a redirect.
	Consul *UpstreamConsul
	// HealthCheck configures active checks; nil when absent.
	HealthCheck *HealthCheck
	// OutlierDetection is the outlier_detection block as written; nil when
	// absent, which means the defaults, on (Outliers).
	OutlierDetection *OutlierDetection
	// TLS configures connections to HTTPS backends; nil when the block is
	// absent (verification against the system roots).
	TLS *TLS
	// Timeouts are always set (defaulted).
	Timeouts Timeouts
	// Range is the upstream block's definition range (`upstream "NAME"`).
	Range hcl2.Range
	// Limits is the limits block (zero when absent).
	Limits UpstreamLimits
	// RateLimit is the rate_limit block, applied after the listener's;
	// nil when absent.
	RateLimit *RateLimit
	// Retry is the retry block, defaulted (DefaultRetry) when absent.
	Retry Retry
	// Hedge is the hedge block; nil when absent (no hedging).
	Hedge *Hedge
}

// DefaultUpgrades is route.upgrades when absent: WebSocket.
var DefaultUpgrades = []string{"websocket"}

// Route is upstream.route: which requests go to the upstream.
type Route struct {
	// Host is empty (any host), an exact host name or IP (lower-cased; IPv6
	// without brackets), or "*.suffix" matching exactly one or more labels
	// before suffix. Never includes a port.
	Host string
	// PathPrefix starts with "/" (default "/" when neither Path nor
	// PathRegex is set; "" when one is).
	PathPrefix string
	// Path is an exact path (a valid path_prefix would be); PathRegex an
	// RE2 expression matched against the whole normalised path
	// (routing.go). At most one of PathPrefix, Path and PathRegex is
	// written.
	Path, PathRegex string
	// Methods are HTTP method tokens; empty means any method.
	Methods []string
	// Upgrades are the protocols the route tunnels (HTTP/1.1 Upgrade
	// tokens such as "websocket", RFC 9110 §7.8; the same names as an
	// extended CONNECT's :protocol), lower-cased; DefaultUpgrades when
	// absent, empty (never nil) when set to [] (every upgrade refused).
	Upgrades []string
	// APIKeys, BasicAuth, JWT and ForwardAuth are the route's edge
	// authentication (auth.go, jwt.go; nil: none).
	APIKeys     *APIKeys
	BasicAuth   *BasicAuth
	JWT         *JWT
	ForwardAuth *ForwardAuth
	// IPAllow and IPDeny are CIDR prefixes applied to the client address
	// after routing (403 ip_denied; deny wins; an empty allow list allows
	// all). Empty when absent.
	IPAllow, IPDeny []string
	// Compress and CORS are the route's response stages (edge.go; nil:
	// none).
	Compress *Compress
	CORS     *CORS
	// StripPrefix removes PathPrefix from the path the backend gets;
	// PrefixRewrite replaces it ("": none; a path in normal form). At most
	// one is set (routing.go).
	StripPrefix   bool
	PrefixRewrite string
	// RequestHeaders and ResponseHeaders are the route's header rules (its
	// upstream's when it has none; nil: none). Redirect answers the route
	// without an upstream (nil: none).
	RequestHeaders, ResponseHeaders *HeaderRules
	Redirect                        *Redirect
	// Timeouts, Retry and RateLimit replace the upstream's for this route
	// (route_policies.go; nil: the upstream's). Timeouts override one by
	// one (0: the upstream's); a retry block replaces the upstream's whole
	// (its unwritten arguments take retry's defaults); a rate_limit is the
	// route's own, with its own buckets.
	Timeouts  *RouteTimeouts
	Retry     *Retry
	RateLimit *RateLimit
	// Splits send the route's requests to other upstreams by weight
	// (splits.go; nil: the route's own upstream); Sticky is a hash_on key
	// (cookie:NAME, header:NAME, client_ip, ...) that keeps a client on
	// one split ("": none).
	Splits []Split
	Sticky string
	// Range is the route block's definition range.
	Range hcl2.Range
}

// Backend is upstream.backend "NAME": a static backend.
type Backend struct {
	// Name is the block label, unique within its upstream.
	Name string
	// Address is the address as written in the file.
	Address string
	// Scheme is "http" (cleartext HTTP/1.1), "https" (HTTP/2 over TLS) or
	// "h2c" (cleartext HTTP/2 with prior knowledge), derived from Address by ParseBackendAddress.
	Scheme string
	// Host is the host name or IP (IPv6 without brackets).
	Host string
	// Port is 1..65535 (80 or 443 when the address has none).
	Port int
	// Weight is 1..MaxWeight (default 100).
	Weight int
	// Range is the backend block's definition range.
	Range hcl2.Range
}

// UpstreamConsul is upstream.consul: backends discovered from the Consul catalog.
type UpstreamConsul struct {
	// Service is the Consul service name (required).
	Service string
	// Tags an instance must all carry.
	Tags []string
	// Health is "passing" (default) or "warning" (also admits instances whose
	// worst check is warning).
	Health string
	// Datacenter, Namespace and Partition scope the query; empty means the
	// agent's defaults.
	Datacenter, Namespace, Partition string
	// Scheme is how discovered instances are reached: "https" (HTTP/2 over
	// TLS, the default, see DefaultDiscoveryScheme), "http" (HTTP/1.1) or
	// "h2c" (cleartext HTTP/2 with prior knowledge).
	// A per-instance ServiceMeta "impulse-scheme" overrides it. For a
	// Connect upstream it follows Protocol ("http" for HTTP/1.1, "https"
	// for HTTP/2, both inside the Connect mTLS) and no meta overrides it.
	Scheme string
	// Connect makes this a Consul Connect (service mesh) upstream: the
	// instances are /v1/health/connect/<Service> (sidecars and Connect-
	// native instances), dialled with mTLS under the gateway's Connect
	// identity (the top-level connect block, required). See
	// connect_upstream.go. ConnectRange is the argument's value range.
	Connect      bool
	ConnectRange hcl2.Range
	// Protocol is what a Connect upstream speaks inside the mTLS
	// connection, named as Consul's service-defaults protocol:
	// "http" (HTTP/1.1, ALPN http/1.1; the default), "http2" or "grpc"
	// (HTTP/2, ALPN h2). Empty when Connect is false.
	Protocol string
}

// HealthCheck is upstream.health_check (active checks).
type HealthCheck struct {
	// Path requested on each backend; starts with "/" (default /health).
	// Empty when GRPC.
	Path string
	// GRPC makes each check a gRPC health check (grpc.health.v1.Health/Check,
	// grpc/grpc doc/health-checking.md) instead of a GET of Path; only
	// SERVING passes. It needs HTTP/2 backends: with a static http://
	// backend, or together with path, it is an error.
	GRPC bool
	// GRPCService is the service the gRPC check asks about ("" = the whole
	// server); only with GRPC.
	GRPCService string
	// Interval between checks (default 5s); must be >= Timeout.
	Interval time.Duration
	// Timeout of one check (default 1s; > 0).
	Timeout time.Duration
	// HealthyThreshold consecutive successes mark a backend healthy (default 2; >= 1).
	HealthyThreshold int
	// UnhealthyThreshold consecutive failures mark it unhealthy (default 3; >= 1).
	UnhealthyThreshold int
	// UnknownIsHealthy lets a backend take traffic before its first check
	// completes (default true: a new Consul instance is usable at once; false
	// waits for one passing check).
	UnknownIsHealthy bool
}

// OutlierDetection is upstream.outlier_detection (passive tracking), on by
// default: Consul's own Envoy sidecars eject a backend after 5
// consecutive failures too.
type OutlierDetection struct {
	// Enabled is false for `enabled = false`, which turns the default off.
	Enabled bool
	// ConsecutiveFailures before ejection (default 5; >= 1).
	ConsecutiveFailures int
	// BaseEjectionTime is the first ejection's length (default 10s; > 0).
	BaseEjectionTime time.Duration
	// MaxEjectionPercent caps ejected backends, 0..100 (default 100:
	// with every member ejected, the one ejected longest ago still takes
	// requests, so ejection never empties an upstream).
	MaxEjectionPercent int
}

// Outliers is the outlier detection in force for u: its block, the
// defaults when absent, nil when `enabled = false`.
func (u *Upstream) Outliers() *OutlierDetection {
	switch od := u.OutlierDetection; {
	case od == nil:
		return &OutlierDetection{Enabled: true, ConsecutiveFailures: DefaultConsecutiveFailures,
			BaseEjectionTime: DefaultBaseEjectionTime, MaxEjectionPercent: DefaultMaxEjectionPercent}
	case !od.Enabled:
		return nil
	default:
		return od
	}
}

// TLS is a client-side tls block (consul, upstream): CertFile/KeyFile are
// an optional client certificate (both or neither) and CAFile replaces the
// system roots. Every file named must exist when the configuration is
// loaded. A listener's tls block is a ListenerTLS.
type TLS struct {
	// CAFile is a PEM bundle of roots that replaces the system roots
	// (client side only; must exist when set).
	CAFile string
	// CertFile is a PEM certificate (chain): an optional client certificate.
	CertFile string
	// KeyFile is the PEM private key of CertFile; set exactly when CertFile is.
	KeyFile string
	// ServerName overrides the name verified in the peer certificate (and sent
	// as SNI); client side only.
	ServerName string
	// InsecureSkipVerify disables peer verification (client side only;
	// default false).
	InsecureSkipVerify bool
	// CAFileRange, CertFileRange and KeyFileRange are the source ranges of
	// those values (zero when absent), for errors found when loading them.
	CAFileRange, CertFileRange, KeyFileRange hcl2.Range
}

// ListenerTLS is a listener's tls block: the certificates it serves and
// how it treats client certificates. Every file named loads when the
// configuration is loaded (validate checks them too).
type ListenerTLS struct {
	// CertFile and KeyFile are the default certificate (a PEM chain) and
	// its key: served when no Certificates entry covers the name the client
	// asked for (SNI), or it asked for none. Required.
	CertFile, KeyFile string
	// Certificates are the certificate blocks, in source order: more
	// certificates, chosen by the DNS names of their Subject Alternative
	// Names (exact, then "*.suffix" covering one label); each has at least
	// one DNS SAN.
	Certificates []Certificate
	// ClientAuth is "none" (the default), "request" (a client certificate
	// is verified when sent) or "require" (no handshake without one that
	// verifies).
	ClientAuth string
	// ClientCAFile is the PEM bundle of the CAs client certificates must
	// chain to; required unless ClientAuth is "none".
	ClientCAFile string
	// ForwardClientCert sends the verified client certificate's identity to
	// backends in X-Forwarded-Client-Cert (Envoy's format); default false. A
	// client's own copy of that header is always removed.
	ForwardClientCert bool
	// CertFileRange, KeyFileRange and ClientCAFileRange are the source
	// ranges of those values, for errors found when loading them.
	CertFileRange, KeyFileRange, ClientCAFileRange hcl2.Range
}

// Certificate is a listener tls block's certificate block.
type Certificate struct {
	// CertFile is a PEM certificate (chain), KeyFile its private key; both
	// required.
	CertFile, KeyFile string
	// CertFileRange and KeyFileRange are the source ranges of those values.
	CertFileRange, KeyFileRange hcl2.Range
	// Range is the block's definition range.
	Range hcl2.Range
}

// Timeouts is upstream.timeouts, the upstream's timeout ladder; every value
// but Request is > 0. A connect or response_header written longer than a
// request timeout is a config error (the request timeout bounds them all);
// defaulted ones are simply cut short by it.
type Timeouts struct {
	// Connect bounds dialing a backend (default 2s).
	Connect time.Duration
	// ResponseHeader bounds waiting for the response header once the
	// request is sent (default 30s); exceeding it answers 504.
	ResponseHeader time.Duration
	// Idle is how long an idle backend connection is kept (default 90s).
	Idle time.Duration
	// BodyIdle bounds each wait for the backend's next response body bytes
	// (default 60s); past it the client's stream is reset and the backend
	// counts a failure.
	BodyIdle time.Duration
	// Request bounds the whole exchange, every attempt and the response
	// body included (default 0: none); past it the client gets 504
	// request_timeout, or a reset once the response started.
	Request time.Duration
}

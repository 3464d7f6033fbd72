package gateway

import (
	"log/slog"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"
	"go.opentelemetry.io/otel/trace"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/auth"
	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/compress"
	"github.com/impulse-agent/impulse-agent/gateway/concurrency"
	"github.com/impulse-agent/impulse-agent/gateway/cors"
	"github.com/impulse-agent/impulse-agent/gateway/headers"
	"github.com/impulse-agent/impulse-agent/gateway/ingress"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/rewrite"
	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// Config is the whole dataplane configuration. Apply accepts a new one at
// any time; the zero values of optional fields are documented per field.
type Config struct {
	Listeners []ListenerConfig
	Upstreams []UpstreamConfig
	// Logger is the gateway's logger (nil: discard). QUICLogger receives
	// quic-go's own log records (nil: none).
	Logger     hclog.Logger
	QUICLogger *slog.Logger
	// Metrics receives request and connection metrics (nil: discard).
	Metrics *metrics.Metrics
	// Paths are the path normalisation settings; the zero value is the
	// default (see pathnorm.PathOptions and NormalizePath). Apply switches them.
	Paths pathnorm.PathOptions
	// MaxRequests bounds the requests in flight through the whole gateway,
	// every listener and upstream together, open tunnels included (the
	// top-level `limits { max_requests }`); 0 means no limit. A request
	// over it gets 503 overloaded with Retry-After at once, before its
	// upstream's limits are looked at (admission.go). Apply switches it at
	// once; requests in flight keep their slots.
	MaxRequests int
	// TracerProvider makes the spans of every request (tracing.go, README
	// "Tracing"); nil means tracing off: nothing is parsed or added, and a
	// client's traceparent reaches the backend unchanged. Apply switches it
	// for new requests; the caller owns its shutdown.
	TracerProvider trace.TracerProvider
	// AccessLog turns the access log on (nil: off): one line per request,
	// written by its own goroutine, never blocking a request (accesslog
	// package; impulse_access_log_dropped and _errors count lines lost).
	// New and Apply open its file (Apply again when unchanged, for
	// logrotate; a failure then keeps the open one). Errors: a file that
	// cannot be opened for appending (*accesslog.OpenError).
	AccessLog *accesslog.Config
}

// DefaultUpgrades is what a route allows when its Upgrades is nil:
// WebSocket (tunnel.DefaultUpgrades).
var DefaultUpgrades = tunnel.DefaultUpgrades

// ListenerConfig is one listener (ingress.Config): HTTP/3 on a UDP socket
// and HTTP/1.1 and HTTP/2 over TLS on a TCP socket, on the same address
// and port, every protocol served by the same request pipeline.
type ListenerConfig = ingress.Config

// Limits are a listener's protocol limits and defences (ingress.Limits).
type Limits = ingress.Limits

// ListenerError is a listener whose socket could not be bound
// (ingress.ListenerError).
type ListenerError = ingress.ListenerError

// Protocols a listener serves (ListenerConfig.Protocols), and the values of
// the protocol label of the request metrics.
const (
	ProtocolH1 = ingress.ProtocolH1
	ProtocolH2 = ingress.ProtocolH2
	ProtocolH3 = ingress.ProtocolH3
)

// UpstreamConfig is one upstream: its routes, policy, transport settings and
// static backends. Discovered backends arrive through SetDiscovered.
type UpstreamConfig struct {
	upstream.Config
	Routes []RouteConfig
	Static []upstream.Spec
	// MaxRequestBodyBytes replaces the listener's Limits.MaxRequestBodyBytes
	// for requests routed to this upstream, in bytes; 0 means the
	// listener's. Apply switches it at once.
	MaxRequestBodyBytes int64
	// RateLimit limits the requests routed to this upstream, after the
	// listener's limit (ratelimit.Config, Gateway.admitRate); nil means
	// none. On Apply an unchanged block keeps its buckets, a changed one
	// starts with an empty table.
	RateLimit *ratelimit.Config
	// BodyIdleTimeout bounds each wait for the backend's next response body
	// bytes (0: DefaultBodyIdleTimeout, 60s); past it the client's stream is
	// reset and the backend blamed (timeouts.go). RequestTimeout bounds the
	// whole exchange, every attempt and the response body included (0:
	// none); past it the client gets 504 request_timeout, or a reset once
	// the response started. Neither applies to tunnels. Apply switches them
	// at once.
	BodyIdleTimeout, RequestTimeout time.Duration

	// Concurrency limits (admission.go); Apply switches them at once and
	// requests in flight keep their slots. A request holds its slots from
	// admission until its response is done (body copied, tunnel closed);
	// one refused by any limit never reaches a backend.
	//
	// MaxRequests bounds the requests in flight to the upstream (queued
	// ones not counted); 0 means no limit. Over it a request gets 503
	// overloaded with Retry-After: at once when MaxQueue is 0, otherwise
	// after waiting its turn (FIFO) for up to QueueTimeout (≤ 0: until a
	// slot frees or the client leaves) among at most MaxQueue others; a
	// request that finds the queue full is refused at once.
	MaxRequests, MaxQueue int
	QueueTimeout          time.Duration
	// MaxRequestsPerBackend bounds the requests in flight to each backend;
	// 0 means no limit. The pick skips a full backend (every policy); when
	// every healthy backend is full the request gets 503 overloaded, not
	// no_healthy_backend. A rebuilt upstream (changed transport settings)
	// counts its new backends from 0 while the old ones drain.
	MaxRequestsPerBackend int
	// Retry is the upstream's retry policy (retry.Policy.Validate); the
	// zero value stands for retry.Default(): one retry of a connect failure
	// or refused stream. Attempts = 1 turns retries off. Hedge sends copies
	// of slow safe requests (the zero value: off). Apply switches both at
	// once; the retry budget's count carries over.
	Retry retry.Policy
	Hedge retry.Hedge
}

// concurrencyLimits is the upstream queue and cap of uc.
func (uc UpstreamConfig) concurrencyLimits() concurrency.Limits {
	return concurrency.Limits{Max: uc.MaxRequests, MaxQueue: uc.MaxQueue, QueueTimeout: uc.QueueTimeout}
}

// RouteConfig is one route of an upstream (see route.Definition for the
// matching rules).
type RouteConfig struct {
	Host       string
	PathPrefix string
	// Path (an exact path) and PathRegex (RE2, matched whole) replace
	// PathPrefix: one of the three is set (route.Definition, README "Path
	// matching"). strip_prefix and prefix_rewrite need a PathPrefix.
	Path, PathRegex string
	Methods         []string
	// Upgrades lists the protocols the route tunnels to HTTP/1.1 backends
	// (case-insensitive upgrade tokens, e.g. "websocket"): an HTTP/1.1
	// Upgrade, or an extended CONNECT's :protocol (RFC 8441, RFC 9220).
	// nil means DefaultUpgrades (WebSocket); an empty, non-nil slice
	// refuses every upgrade (403 upgrade_not_allowed).
	Upgrades []string
	// Auth is the route's edge authentication (authn.go, auth.Config),
	// after routing and before the rate limits; the zero value is none.
	// Apply switches it at once; a forward_auth block unchanged keeps its
	// connections.
	Auth auth.Config
	// IPRules refuse clients of this route, by the client address the
	// listener settled (clientaddr), with 403 ip_denied right after routing
	// (deny wins; an empty allow list allows all). Apply switches them at
	// once.
	IPRules clientaddr.Rules
	// CORS is the route's CORS policy (edge.go, cors.Config; nil: none):
	// preflights answered at the edge, CORS fields on every response.
	// Compress encodes the route's responses (compress.Config; nil: none).
	// Apply switches both at once.
	CORS     *cors.Config
	Compress *compress.Config
	// Rewrite changes the path the backend gets (edge_rules.go,
	// rewrite.Config: strip_prefix, prefix_rewrite); the zero value
	// forwards the path as routed.
	Rewrite rewrite.Config
	// Redirect answers the route's requests with a redirect, without an
	// upstream (rewrite.RedirectConfig; nil: none): after the IP rules
	// and the early-data check, before authentication.
	Redirect *rewrite.RedirectConfig
	// RequestHeaders change the fields the backend gets, after
	// authentication and the rate limits; ResponseHeaders those the
	// client gets, on the backend's answers and the gateway's own after
	// routing (headers.Config; the zero value: none). Apply switches all
	// at once.
	RequestHeaders, ResponseHeaders headers.Config
	// Per-route policies (route_policies.go), each replacing its
	// upstream's for this route only; nil or zero: the upstream's.
	// RateLimit is the route's own limit, with buckets of its own, in
	// place of the upstream's (a listener's still applies first). Retry
	// replaces the upstream's retry policy (retry.Policy.Validate); the
	// retry budget stays the upstream's, shared with its other routes.
	// Timeouts override the upstream's request, body_idle and
	// response_header timeouts one by one. Apply switches them at once;
	// an unchanged rate_limit keeps its buckets.
	RateLimit *ratelimit.Config
	Retry     *retry.Policy
	Timeouts  RouteTimeouts
	// Splits send the route's requests to other upstreams by weight
	// (splits.go, README "Traffic splits"; nil: the route's own
	// upstream). Each named upstream must be defined; weights are ≥ 0
	// and not all 0; a route with a Redirect has none. The chosen
	// upstream is the request's: its health, limits, retries, timeouts
	// and metrics apply. Sticky is a hash_on key (balance.ParseHashKey:
	// cookie:NAME, header:NAME, client_ip, ...) that keeps a key on one
	// split; "" spreads each request by weight.
	Splits []SplitConfig
	Sticky string
}

// SplitConfig is one weighted split of a route: Upstream (a defined
// upstream's name) gets Weight / (sum of the route's weights) of its
// requests.
type SplitConfig struct {
	Upstream string `json:"upstream"`
	Weight   int    `json:"weight"`
}

// RouteTimeouts are a route's overrides of its upstream's timeouts (0:
// the upstream's). ResponseHeader is timed by the gateway itself and can
// only shorten the upstream's (its transport still bounds HTTP/1.1
// backends by the upstream's).
type RouteTimeouts struct {
	Request, BodyIdle, ResponseHeader time.Duration
}

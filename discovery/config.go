package discovery

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"
)

// Defaults and limits applied by [New] to a zero or out-of-range [Config] field.
const (
	// DefaultWait is the blocking-query wait used when Config.Wait is zero.
	DefaultWait = 5 * time.Minute
	// MinWait and MaxWait bound Config.Wait. Consul itself caps a blocking
	// wait at 10 minutes (Consul blocking queries docs).
	MinWait = time.Second
	MaxWait = 10 * time.Minute
	// DefaultMinBackoff and DefaultMaxBackoff bound the retry delay after a
	// failed query when Config.MinBackoff / Config.MaxBackoff are zero.
	DefaultMinBackoff = 250 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
	// DefaultResyncGrace is Config.ResyncGrace when zero.
	DefaultResyncGrace = 30 * time.Second
	// DefaultRate (queries per second) and DefaultBurst form the token bucket
	// that bounds how often a single watch may query Consul when Config.Rate /
	// Config.Burst are zero. Rate limits the loop even when Consul misbehaves
	// (e.g. answers every blocking query at once with index 0).
	DefaultRate  = 2.0
	DefaultBurst = 2
)

// timeoutMargin is added to wait + wait/16 to form the HTTP client timeout.
// A variable so tests can shorten it.
var timeoutMargin = 5 * time.Second

// RequestTimeout returns the HTTP client timeout used for blocking queries
// with the given wait: wait + wait/16 + a 5 s margin. Consul adds up to
// wait/16 of random jitter to a blocking wait (Consul blocking queries docs),
// so any shorter timeout turns a well-behaved Consul into timeout errors.
func RequestTimeout(wait time.Duration) time.Duration {
	return wait + wait/16 + timeoutMargin
}

// TLSConfig configures TLS towards the Consul HTTP API. Empty fields fall back
// to the CONSUL_CACERT, CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY,
// CONSUL_TLS_SERVER_NAME and CONSUL_HTTP_SSL_VERIFY environment variables, as
// consul/api's DefaultConfig does.
type TLSConfig struct {
	// CAFile is a PEM file of CA certificates used to verify Consul.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and key for mutual
	// TLS. Both or neither.
	CertFile string
	KeyFile  string
	// ServerName overrides the name used for SNI and certificate verification.
	ServerName string
	// InsecureSkipVerify disables certificate verification (tests only).
	InsecureSkipVerify bool
}

// Config configures a [Client]. The zero value talks to localhost:8500 over
// HTTP with the documented defaults. Empty Address, Scheme, Token, TokenFile
// and Datacenter fall back to the CONSUL_HTTP_ADDR, CONSUL_HTTP_SSL,
// CONSUL_HTTP_TOKEN, CONSUL_HTTP_TOKEN_FILE environment variables like the
// Consul CLI (consul/api DefaultConfig).
type Config struct {
	// Address is host:port of the Consul HTTP API; an "http://" or "https://"
	// prefix also sets the scheme. Default "localhost:8500".
	Address string
	// Scheme is "http" or "https". Default "http", or "https" when TLS.CAFile
	// or TLS.CertFile is set.
	Scheme string
	// Token is the ACL token, sent only in the X-Consul-Token header and never
	// logged.
	Token string
	// TokenFile is a file holding the ACL token; read once by [New] and
	// preferred over Token.
	TokenFile string
	// Datacenter is the default datacenter for queries; Query.Datacenter wins.
	Datacenter string
	// Wait is the blocking-query wait time. Default 5m; must be within
	// 1s..10m (Consul blocking queries docs cap it at 10m).
	Wait time.Duration
	// Stale allows any server to answer (?stale), trading freshness for load
	// spreading and availability without a leader.
	Stale bool
	// TLS configures HTTPS towards Consul.
	TLS TLSConfig
	// Logger receives errors and state changes; nil discards. It is used as
	// given: the caller names it (e.g. root.Named("discovery")).
	Logger hclog.Logger
	// Metrics receives the metrics declared in metrics.go; nil disables them.
	Metrics *metrics.Metrics
	// MinBackoff and MaxBackoff bound the jittered exponential retry delay
	// after a failed query. Defaults 250ms and 30s; MaxBackoff >= MinBackoff.
	MinBackoff time.Duration
	MaxBackoff time.Duration
	// Rate (queries per second) and Burst form a token bucket limiting the
	// queries of each watch. Defaults DefaultRate and DefaultBurst.
	Rate  float64
	Burst int
	// ChangeFeed makes every service watch follow the change feed of its
	// scope (feed.go) instead of holding a blocking query of its own: the
	// connections to Consul stay at most 8 whatever the number of services
	// (Consul's default limits.http_max_conns_per_client is 200). Off, each
	// watch holds one blocking query, so one connection.
	ChangeFeed bool
	// ResyncGrace is how long after a Consul outage or index reset an answer
	// that would empty a watch's non-empty set is held back, the last set
	// kept, while Consul may be refilling a lost state (a restarted dev agent,
	// a server restored from an old snapshot). Default DefaultResyncGrace
	// (30s, Nomad's service sync period); negative disables the hold.
	ResyncGrace time.Duration
}

// withDefaults returns cfg with zero fields defaulted, or an error naming the
// first invalid field.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Wait == 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.Wait < MinWait || cfg.Wait > MaxWait {
		return cfg, fmt.Errorf("discovery: wait %s out of range %s..%s", cfg.Wait, MinWait, MaxWait)
	}
	switch cfg.Scheme {
	case "", "http", "https":
	default:
		return cfg, fmt.Errorf("discovery: scheme %q: must be http or https", cfg.Scheme)
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.MinBackoff < 0 || cfg.MaxBackoff < cfg.MinBackoff {
		return cfg, fmt.Errorf("discovery: backoff %s..%s: need 0 < min <= max", cfg.MinBackoff, cfg.MaxBackoff)
	}
	if cfg.ResyncGrace == 0 {
		cfg.ResyncGrace = DefaultResyncGrace
	}
	if cfg.Rate == 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.Rate < 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0) || cfg.Burst < 0 {
		return cfg, fmt.Errorf("discovery: rate %v burst %d: must be positive", cfg.Rate, cfg.Burst)
	}
	if (cfg.TLS.CertFile == "") != (cfg.TLS.KeyFile == "") {
		return cfg, errors.New("discovery: tls cert_file and key_file must be set together")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return cfg, nil
}

// Client watches Consul services. It is safe for concurrent use; each
// [Client.Watch] call is independent. Create it with [New].
type Client struct {
	cfg Config
	api *api.Client
	// readAPI serves re-reads and sweeps (Client.read), over a transport
	// holding at most maxReads connections.
	readAPI  *api.Client
	readHTTP *http.Client
	http     *http.Client // used by api; Timeout = RequestTimeout(Wait)
	metrics  sink
	// certAsked: a Consul server asked for a client certificate that the
	// configuration does not have (watchCertRequests).
	certAsked atomic.Bool

	// reads holds one token per re-read or sweep request in flight
	// (maxReads): the change feed's bound on connections.
	reads chan struct{}
	// idleRereads counts re-reads that found nothing newer than the watch
	// had (each held a read slot for rereadWait), for tests.
	idleRereads atomic.Int64
	// patches counts results the change feed's check statuses produced
	// without a read (feedSub.patched).
	patches atomic.Int64

	mu      sync.Mutex
	watches map[*watchState]struct{}
	feeds   map[feedScope]*feed
}

// New validates cfg, applies defaults and builds the Consul API client. It does
// not contact Consul. Errors: an invalid field, an unreadable TokenFile or TLS
// file.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	def := api.DefaultConfig() // environment fallbacks, as the Consul CLI
	tlsCfg := def.TLSConfig
	if cfg.TLS.CAFile != "" {
		tlsCfg.CAFile, tlsCfg.CAPath = cfg.TLS.CAFile, ""
	}
	if cfg.TLS.CertFile != "" {
		tlsCfg.CertFile, tlsCfg.KeyFile = cfg.TLS.CertFile, cfg.TLS.KeyFile
	}
	if cfg.TLS.ServerName != "" {
		tlsCfg.Address = cfg.TLS.ServerName
	}
	tlsCfg.InsecureSkipVerify = tlsCfg.InsecureSkipVerify || cfg.TLS.InsecureSkipVerify
	transport := cleanhttp.DefaultPooledTransport()
	// Keep the connections of the change feed's queries (3 per scope), a
	// catalog watch and a registration for reuse: cleanhttp keeps
	// GOMAXPROCS+1.
	transport.MaxIdleConnsPerHost = 2 * maxReads
	// Consul's API never redirects, and http.Client would follow one with
	// X-Consul-Token (only its own auth fields are dropped across hosts):
	// a redirect is an answer, failed as any other non-200.
	hc := &http.Client{Transport: transport, Timeout: RequestTimeout(cfg.Wait),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if transport.TLSClientConfig, err = api.SetupTLSConfig(&tlsCfg); err != nil {
		return nil, fmt.Errorf("discovery: tls: %w", err)
	}
	apiCfg := &api.Config{
		Address:    cfg.Address,
		Scheme:     cfg.Scheme,
		Datacenter: cfg.Datacenter,
		Token:      cfg.Token,
		TokenFile:  cfg.TokenFile,
		WaitTime:   cfg.Wait,
		TLSConfig:  tlsCfg,
		Transport:  transport,
		HttpClient: hc,
	}
	if cfg.Scheme == "" && (cfg.TLS.CAFile != "" || cfg.TLS.CertFile != "") {
		apiCfg.Scheme = "https"
	}
	c, err := api.NewClient(apiCfg)
	if err != nil {
		return nil, fmt.Errorf("discovery: consul client: %w", err)
	}
	cl := &Client{
		cfg:     cfg,
		api:     c,
		http:    hc,
		metrics: sink{cfg.Metrics},
		watches: make(map[*watchState]struct{}),
		feeds:   make(map[feedScope]*feed),
		reads:   make(chan struct{}, maxReads),
	}
	cl.watchCertRequests(transport.TLSClientConfig)
	// Re-reads and sweeps have a transport of their own, capped at maxReads
	// connections: on a shared one, a burst of reads dials while another
	// connection is being freed, and the spare stays idle (9 connections
	// at once in a 5,000-service cold start, with 6 requests in flight).
	rt := transport.Clone()
	rt.MaxConnsPerHost, rt.MaxIdleConnsPerHost = maxReads, maxReads
	// Reads come in bursts: an idle one held for net/http's 90 s counts
	// against Consul's limits.http_max_conns_per_client while the feed may
	// need to reconnect.
	rt.IdleConnTimeout = readIdleTimeout
	rcfg := *apiCfg
	rcfg.Transport = rt
	rcfg.HttpClient = &http.Client{Transport: rt, Timeout: hc.Timeout, CheckRedirect: hc.CheckRedirect}
	if cl.readAPI, err = api.NewClient(&rcfg); err != nil {
		return nil, fmt.Errorf("discovery: consul client: %w", err)
	}
	cl.readHTTP = rcfg.HttpClient
	return cl, nil
}

// readIdleTimeout is how long an idle re-read connection stays open.
const readIdleTimeout = 5 * time.Second

// Close releases idle connections to Consul. It does not stop watches: cancel
// their contexts for that. The Client stays usable.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
	c.readHTTP.CloseIdleConnections()
}

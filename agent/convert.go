package agent

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/auth"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/rewrite"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// ConsulWeightScale multiplies Consul's Weights (default 1) so discovered
// instances share the scale of static backends (default weight 100): an
// upstream mixing both splits traffic evenly by default, and slow start can
// ramp a default instance in 100 steps.
const ConsulWeightScale = 100

// MetaScheme is the Consul ServiceMeta key with which an instance overrides
// its upstream's consul.scheme ("http", "https" or "h2c").
const MetaScheme = "impulse-scheme"

// gatewayConfig converts a validated configuration into the gateway's types,
// loading TLS material from disk (the consul block's too, so that a bad
// file is refused before anything changes). Errors are *ConfigError
// pointing at the file at fault (cert_file, key_file, ca_file,
// client_ca_file).
func gatewayConfig(c *hcl.Config) (gateway.Config, error) {
	gc := gateway.Config{Paths: pathOptions(c.Paths), MaxRequests: c.Limits.MaxRequests, AccessLog: accessLogConfig(c.AccessLog)}
	for _, l := range c.Listeners {
		lc := gateway.ListenerConfig{Name: l.Name, Address: l.Address} // connect: TLS from the mesh (meshListeners)
		if !l.Connect {
			var err error
			if lc, err = listenerConfig(l); err != nil { // listenertls.go
				return gc, err
			}
		}
		lc.Protocols, lc.AltSvcPort, lc.AltSvcMaxAge = l.Protocols, l.AltSvcPort, l.AltSvcMaxAge
		lc.EarlyData = l.EarlyData
		lc.Limits = listenerLimits(l.Limits)
		lc.RateLimit = rateLimit(l.RateLimit)
		listenerClient(&lc, l) // clientaddr.go
		gc.Listeners = append(gc.Listeners, lc)
	}
	for _, u := range c.Upstreams {
		uc, err := upstreamConfig(u)
		if err != nil {
			return gc, err
		}
		gc.Upstreams = append(gc.Upstreams, uc)
	}
	if c.Consul != nil && c.Consul.TLS != nil {
		if _, err := clientTLS(c.Consul.TLS, "consul tls"); err != nil {
			return gc, err
		}
	}
	return gc, nil
}

// accessLogConfig converts the access_log block (nil: off).
func accessLogConfig(a *hcl.AccessLog) *accesslog.Config {
	if a == nil {
		return nil
	}
	return &accesslog.Config{Path: a.Path, Format: a.Format, IncludeQuery: a.IncludeQuery}
}

// upstreamConfig converts one upstream, loading its TLS material from disk.
func upstreamConfig(u hcl.Upstream) (gateway.UpstreamConfig, error) {
	uc := gateway.UpstreamConfig{Config: upstream.Config{
		Name:                  u.Name,
		LoadBalancing:         u.LoadBalancing,
		HashOn:                u.HashOn,
		SlowStart:             u.SlowStart,
		ConnectTimeout:        u.Timeouts.Connect,
		ResponseHeaderTimeout: u.Timeouts.ResponseHeader,
		IdleTimeout:           u.Timeouts.Idle,
		Discovered:            u.Consul != nil,
	}, MaxRequestBodyBytes: u.Limits.MaxRequestBodyBytes, RateLimit: rateLimit(u.RateLimit),
		BodyIdleTimeout: u.Timeouts.BodyIdle, RequestTimeout: u.Timeouts.Request,
		MaxRequests: u.Limits.MaxRequests, MaxRequestsPerBackend: u.Limits.MaxRequestsPerBackend,
		MaxQueue: u.Limits.MaxQueue, QueueTimeout: u.Limits.QueueTimeout}
	if hc := u.HealthCheck; hc != nil {
		uc.Active = &health.ActiveConfig{Path: hc.Path, Interval: hc.Interval, Timeout: hc.Timeout,
			HealthyThreshold: hc.HealthyThreshold, UnhealthyThreshold: hc.UnhealthyThreshold, UnknownIsHealthy: hc.UnknownIsHealthy,
			GRPC: hc.GRPC, GRPCService: hc.GRPCService}
	}
	if od := u.Outliers(); od != nil {
		uc.Passive = &health.PassiveConfig{ConsecutiveFailures: od.ConsecutiveFailures,
			BaseEjectionTime: od.BaseEjectionTime, MaxEjectionPercent: od.MaxEjectionPercent}
	}
	rp, err := retryPolicy(u.Retry)
	if err != nil {
		return uc, fmt.Errorf("upstream %q retry: %w", u.Name, err)
	}
	uc.Retry = rp
	if h := u.Hedge; h != nil {
		uc.Hedge = retry.Hedge{Delay: h.Delay, Max: h.Max}
	}
	if u.TLS != nil {
		tc, err := clientTLS(u.TLS, fmt.Sprintf("upstream %q tls", u.Name))
		if err != nil {
			return uc, err
		}
		uc.TLS = tc
	}
	for i, r := range u.Routes {
		pol, err := routePolicies(r)
		if err != nil {
			return uc, fmt.Errorf("upstream %q route %d: %w", u.Name, i, err)
		}
		uc.Routes = append(uc.Routes, gateway.RouteConfig{RateLimit: pol.RateLimit, Retry: pol.Retry, Timeouts: pol.Timeouts, // edge.go
			Host: r.Host, PathPrefix: r.PathPrefix, Path: r.Path, PathRegex: r.PathRegex, Methods: r.Methods, Upgrades: r.Upgrades,
			Auth: routeAuth(r), IPRules: routeIPRules(r), Compress: routeCompress(r), CORS: routeCORS(r), // edge.go
			Rewrite: rewrite.Config{StripPrefix: r.StripPrefix, PrefixRewrite: r.PrefixRewrite}, Redirect: routeRedirect(r),
			RequestHeaders: routeHeaders(r.RequestHeaders), ResponseHeaders: routeHeaders(r.ResponseHeaders),
			Splits: routeSplits(r), Sticky: r.Sticky}) // edge.go
	}
	for _, b := range u.Backends {
		uc.Static = append(uc.Static, upstream.Spec{ID: b.Name, Scheme: b.Scheme, Host: b.Host, Port: b.Port, Weight: b.Weight})
	}
	return uc, nil
}

// retryPolicy converts upstream.retry: the back-off is capped at 10 × its
// base, as Envoy's (25 ms → 250 ms by default). Errors: an `on` value the
// gateway does not know (hcl validates them; a mismatch is a bug).
func retryPolicy(r hcl.Retry) (retry.Policy, error) {
	if r.Attempts == 0 {
		// Not from a retry block (catalog upstreams, hand-built configs):
		// the zero policy, which the gateway takes as retry.Default().
		return retry.Policy{}, nil
	}
	p := retry.Policy{
		Attempts: r.Attempts, PerTryTimeout: r.PerTryTimeout,
		Backoff: r.Backoff, MaxBackoff: 10 * r.Backoff, MaxBodyBytes: r.MaxBodyBytes,
		Budget: retry.Budget{Percent: r.BudgetPercent, MinConcurrency: r.MinRetryConcurrency},
	}
	for _, name := range r.On {
		c, ok := retry.ParseCondition(name)
		if !ok {
			return p, fmt.Errorf("unknown condition %q", name)
		}
		p.On |= c
	}
	return p, p.Validate()
}

// listenerLimits converts listener.limits.
func listenerLimits(l hcl.ListenerLimits) gateway.Limits {
	return gateway.Limits{
		MaxHeaderBytes: l.MaxHeaderBytes, MaxURIBytes: l.MaxURIBytes, MaxRequestBodyBytes: l.MaxRequestBodyBytes,
		ReadHeaderTimeout: l.ReadHeaderTimeout, ClientBodyTimeout: l.ClientBodyTimeout, IdleTimeout: l.IdleTimeout,
		MaxConnections: l.MaxConnections, MaxConcurrentStreams: l.MaxConcurrentStreams,
	}
}

// rateLimit converts a rate_limit block (nil: none).
func rateLimit(r *hcl.RateLimit) *ratelimit.Config {
	if r == nil {
		return nil
	}
	return &ratelimit.Config{RequestsPerSecond: r.RequestsPerSecond, Burst: r.Burst, Key: r.Key}
}

// clientTLS builds the configuration for connections to HTTPS backends:
// verification on unless insecure_skip_verify, ca_file replacing the system
// roots, an optional client certificate. path is the block's field path
// for errors (*ConfigError at ca_file, cert_file or key_file).
func clientTLS(t *hcl.TLS, path string) (*tls.Config, error) {
	tc := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, configErr(t.CAFileRange, "Cannot read CA bundle", path+" ca_file", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, configErr(t.CAFileRange, "Invalid CA bundle", path+" ca_file", fmt.Errorf("%s: no PEM certificates", t.CAFile))
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := loadKeyPair(t, path)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// discoveryConfig converts the consul block.
func discoveryConfig(c *hcl.Consul) discovery.Config {
	dc := discovery.Config{
		Address: c.Address, Scheme: c.Scheme, Token: c.Token, TokenFile: c.TokenFile,
		Datacenter: c.Datacenter, Wait: c.Wait, Stale: c.Stale,
		ResyncGrace: c.ResyncGrace,
		// Always: one blocking query per service would need a connection
		// each, and Consul's default limits allow 200 per client.
		ChangeFeed: true,
	}
	if c.ResyncGrace == 0 {
		dc.ResyncGrace = -1 // off; discovery's zero means its default
	}
	if c.TLS != nil {
		dc.TLS = discovery.TLSConfig{CAFile: c.TLS.CAFile, CertFile: c.TLS.CertFile, KeyFile: c.TLS.KeyFile,
			ServerName: c.TLS.ServerName, InsecureSkipVerify: c.TLS.InsecureSkipVerify}
	}
	return dc
}

// resolveToken reads token_file (re-read on every reload, so a rotated token
// takes effect) or returns the inline token.
func resolveToken(c *hcl.Consul) (string, error) {
	if c.TokenFile == "" {
		return c.Token, nil
	}
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return "", configErr(c.TokenFileRange, "Cannot read token file", "consul token_file", err)
	}
	// As Consul reads it, plus a leading UTF-8 byte order mark (Windows
	// editors) that is never part of a token.
	return strings.TrimSpace(strings.TrimPrefix(string(b), "\uFEFF")), nil
}

func sameConsul(a, b hcl.Consul) bool {
	ta, tb := hcl.TLS{}, hcl.TLS{}
	if a.TLS != nil {
		ta = *a.TLS
	}
	if b.TLS != nil {
		tb = *b.TLS
	}
	a.TLS, b.TLS, a.Register, b.Register, a.Catalog, b.Catalog = nil, nil, nil, nil, nil, nil
	// Source ranges move with unrelated edits; they are not settings.
	a.TokenFileRange, b.TokenFileRange = hcl2.Range{}, hcl2.Range{}
	ta.CAFileRange, ta.CertFileRange, ta.KeyFileRange = hcl2.Range{}, hcl2.Range{}, hcl2.Range{}
	tb.CAFileRange, tb.CertFileRange, tb.KeyFileRange = hcl2.Range{}, hcl2.Range{}, hcl2.Range{}
	return a == b && ta == tb
}

// query converts an upstream's consul block into a discovery query.
func query(u *hcl.UpstreamConsul) discovery.Query {
	return discovery.Query{Service: u.Service, Tags: u.Tags, Health: u.Health,
		Datacenter: u.Datacenter, Namespace: u.Namespace, Partition: u.Partition, Connect: u.Connect}
}

// queryKey is the key of u's query (discovery.Query.Key, which keys the
// plain query of a catalog upstream without building url.Values).
func queryKey(u *hcl.UpstreamConsul) string { return query(u).Key() }

// specs converts a discovered snapshot into backend specs for one upstream.
// An instance's ServiceMeta "impulse-scheme" overrides the upstream's scheme
// (not for a Connect query: the scheme is the upstream's protocol inside
// the mTLS connection);
// instances with an unusable scheme, port or address stay members but are
// suppressed (reported, never routed to) and listed in skipped.
func specs(s discovery.Snapshot, scheme string) (out []upstream.Spec, skipped []string) {
	for _, in := range s.Instances {
		sc := scheme
		if v, ok := in.Meta[MetaScheme]; ok && !s.Query.Connect {
			sc = v
		}
		sp := upstream.Spec{ID: in.ID, Scheme: sc, Host: in.Address, Port: in.Port, Weight: in.Weight * ConsulWeightScale}
		switch {
		case sc != "http" && sc != "https" && sc != "h2c":
			sp.Suppressed = "unusable impulse-scheme " + strconv.Quote(sc)
		case in.Port < 1 || in.Port > 65535:
			sp.Suppressed = "unusable port " + strconv.Itoa(in.Port)
		case in.Address == "":
			sp.Suppressed = "no address"
		}
		if sp.Suppressed != "" {
			skipped = append(skipped, in.ID)
		}
		out = append(out, sp)
	}
	return out, skipped
}

// routeAuth converts a route's api_keys, basic_auth, jwt and forward_auth
// blocks (the credentials, a jwks_file's keys and a jwks_ca_file's CAs
// were read and parsed by hcl at load).
func routeAuth(r hcl.Route) auth.Config {
	var c auth.Config
	if k := r.APIKeys; k != nil {
		c.APIKeys = &auth.APIKeysConfig{Header: k.Header, Keys: k.Keys}
	}
	if b := r.BasicAuth; b != nil {
		c.Basic = &auth.BasicConfig{Realm: b.Realm, Users: b.Users}
	}
	if j := r.JWT; j != nil {
		c.JWT = &auth.JWTConfig{Issuer: j.Issuer, Audiences: j.Audiences, Algorithms: j.Algorithms, Keys: j.JWKS,
			JWKSURL: j.JWKSURL, JWKSRoots: j.JWKSRoots, ForwardClaims: j.ForwardClaims, ClockSkew: j.ClockSkew, Realm: j.Realm}
	}
	if f := r.ForwardAuth; f != nil {
		c.Forward = &auth.ForwardConfig{Address: f.Address, CopyRequestHeaders: f.CopyRequestHeaders,
			CopyResponseHeaders: f.CopyResponseHeaders, Timeout: f.Timeout}
	}
	return c
}

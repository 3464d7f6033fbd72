package agent

import (
	"crypto/x509"
	"slices"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/internal/jwks"
	"github.com/impulse-agent/impulse-agent/internal/testjwt"
)

// TestDiscoveryConfigResyncGrace: consul.resync_grace = "0s" turns the hold
// off, which discovery spells as a negative duration (its zero means the
// default).
func TestDiscoveryConfigResyncGrace(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{10 * time.Second, 10 * time.Second},
		{time.Minute, time.Minute},
		{0, -1},
	} {
		if got := discoveryConfig(&hcl.Consul{ResyncGrace: tc.in}).ResyncGrace; got != tc.want {
			t.Errorf("resync_grace %s → %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestLimitsConverted: listener.limits, upstream.limits and the top-level
// limits reach the gateway's configuration unchanged.
func TestLimitsConverted(t *testing.T) {
	gc := convertedConfig(t, `
listener "public" {
  address = "127.0.0.1:0"
  tls {
    cert_file = "%[1]s"
    key_file  = "%[2]s"
  }
  limits {
    max_header_bytes       = 32768
    max_uri_bytes          = 4096
    max_request_body_bytes = 10485760
    read_header_timeout    = "5s"
    client_body_timeout    = "30s"
    idle_timeout           = "90s"
    max_connections        = 10000
    max_concurrent_streams = 100
  }
}
upstream "uploads" {
  route {}
  backend "a" { address = "http://127.0.0.1:9000" }
  limits {
    max_request_body_bytes   = 1073741824
    max_requests             = 100
    max_requests_per_backend = 10
    max_queue                = 50
    queue_timeout            = "1500ms"
  }
}
limits { max_requests = 5000 }
`)
	got := gc.Listeners[0].Limits
	want := gateway.Limits{MaxHeaderBytes: 32768, MaxURIBytes: 4096, MaxRequestBodyBytes: 10 << 20, ReadHeaderTimeout: 5 * time.Second,
		ClientBodyTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second, MaxConnections: 10000, MaxConcurrentStreams: 100}
	if got != want {
		t.Errorf("listener limits %+v, want %+v", got, want)
	}
	if n := gc.Upstreams[0].MaxRequestBodyBytes; n != 1<<30 {
		t.Errorf("upstream max_request_body_bytes %d, want %d", n, 1<<30)
	}
	if u := gc.Upstreams[0]; u.MaxRequests != 100 || u.MaxRequestsPerBackend != 10 || u.MaxQueue != 50 || u.QueueTimeout != 1500*time.Millisecond {
		t.Errorf("upstream concurrency limits %d/%d/%d/%v, want 100/10/50/1.5s", u.MaxRequests, u.MaxRequestsPerBackend, u.MaxQueue, u.QueueTimeout)
	}
	if gc.MaxRequests != 5000 {
		t.Errorf("top-level max_requests %d, want 5000", gc.MaxRequests)
	}
}

// TestTimeoutsConverted: upstream.timeouts reach the gateway: connect and
// response_header for the transport, body_idle and request for the
// pipeline; without a block, the defaults (body_idle 60s, no request
// timeout).
func TestTimeoutsConverted(t *testing.T) {
	gc := convertedConfig(t, tlsListener+`
upstream "api" {
  route { path_prefix = "/api/" }
  backend "a" { address = "http://127.0.0.1:9000" }
  timeouts {
    connect         = "1s"
    response_header = "5s"
    idle            = "30s"
    body_idle       = "15s"
    request         = "10s"
  }
}
upstream "web" {
  route {}
  backend "a" { address = "http://127.0.0.1:9001" }
}
`)
	api, web := gc.Upstreams[0], gc.Upstreams[1]
	if api.ConnectTimeout != time.Second || api.ResponseHeaderTimeout != 5*time.Second || api.IdleTimeout != 30*time.Second ||
		api.BodyIdleTimeout != 15*time.Second || api.RequestTimeout != 10*time.Second {
		t.Errorf("api timeouts: %+v", api)
	}
	if web.BodyIdleTimeout != 60*time.Second || web.RequestTimeout != 0 {
		t.Errorf("web timeouts: body_idle %v, request %v; want 60s, 0", web.BodyIdleTimeout, web.RequestTimeout)
	}
}

// TestRetryConverted: upstream.retry and upstream.hedge reach the
// gateway's policy; the defaults are retry.Default(); hcl accepts exactly
// the gateway's conditions.
func TestRetryConverted(t *testing.T) {
	if !slices.Equal(hcl.RetryConditions(), retry.ConditionNames()) {
		t.Fatalf("hcl accepts %v, the gateway knows %v", hcl.RetryConditions(), retry.ConditionNames())
	}
	def, err := retryPolicy(hcl.DefaultRetry())
	if err != nil || def != retry.Default() {
		t.Fatalf("defaults: %+v, %v; want %+v", def, err, retry.Default())
	}
	gc := convertedConfig(t, tlsListener+`
upstream "api" {
  route {}
  backend "a" { address = "http://127.0.0.1:9000" }
  retry {
    attempts              = 4
    on                    = ["reset", "503"]
    per_try_timeout       = "300ms"
    backoff               = "10ms"
    max_body_bytes        = 1024
    budget_percent        = 30
    min_retry_concurrency = 1
  }
  hedge { delay = "40ms" }
}
`)
	want := retry.Policy{Attempts: 4, On: retry.Reset | retry.Status503, PerTryTimeout: 300 * time.Millisecond,
		Backoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, MaxBodyBytes: 1024,
		Budget: retry.Budget{Percent: 30, MinConcurrency: 1}}
	if got := gc.Upstreams[0].Retry; got != want {
		t.Errorf("retry %+v, want %+v", got, want)
	}
	if got := gc.Upstreams[0].Hedge; got != (retry.Hedge{Delay: 40 * time.Millisecond, Max: 1}) {
		t.Errorf("hedge %+v", got)
	}
}

// TestQueryKey: queryKey is Query.Key for every query, the plain ones it
// keys itself included.
func TestQueryKey(t *testing.T) {
	for _, u := range []hcl.UpstreamConsul{
		{Service: "web"},
		{Service: "web", Health: "passing"},
		{Service: "web", Health: "warning"},
		{Service: "a b/c?d&e=f%g+h", Health: "passing"},
		{Service: "ünï", Health: "passing"},
		{Service: "web", Tags: []string{"b", "a", "b"}},
		{Service: "web", Datacenter: "dc2"},
		{Service: "web", Namespace: "ns", Partition: "p", Health: "warning"},
	} {
		if got, want := queryKey(&u), query(&u).Key(); got != want {
			t.Errorf("queryKey(%+v) = %q, Key %q", u, got, want)
		}
	}
}

// TestRouteAuthJWT: a route's jwt block reaches the gateway with every
// value hcl read: the jwks_file's keys, the jwks_ca_file's CAs, the
// forwarded claims and the defaults.
func TestRouteAuthJWT(t *testing.T) {
	set, _ := jwks.Parse(testjwt.JWKS(testjwt.ES256("k")), jwks.DefaultAlgorithms)
	pool := x509.NewCertPool()
	c := routeAuth(hcl.Route{JWT: &hcl.JWT{Issuer: "i", Audiences: []string{"a"}, JWKSURL: "https://h/k", JWKSRoots: pool,
		Algorithms: []string{"ES256"}, ForwardClaims: map[string]string{"sub": "X-User"}, ClockSkew: time.Second, Realm: "r"}})
	j := c.JWT
	if j == nil || j.Issuer != "i" || !slices.Equal(j.Audiences, []string{"a"}) || j.JWKSURL != "https://h/k" || j.JWKSRoots != pool ||
		!slices.Equal(j.Algorithms, []string{"ES256"}) || j.ForwardClaims["sub"] != "X-User" || j.ClockSkew != time.Second || j.Realm != "r" || j.Keys != nil {
		t.Errorf("jwt = %+v", j)
	}
	if c := routeAuth(hcl.Route{JWT: &hcl.JWT{Issuer: "i", JWKS: set}}); c.JWT.Keys != set || c.JWT.JWKSURL != "" {
		t.Errorf("jwks_file: %+v", c.JWT)
	}
}

package agent

import (
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
)

// TestRateLimitConverted: listener and upstream rate_limit blocks reach
// the gateway as the configuration the gateway itself would make of them
// (hcl's default burst is ratelimit's), and no block means no limit.
func TestRateLimitConverted(t *testing.T) {
	gc := convertedConfig(t, `
listener "public" {
  address = "127.0.0.1:0"
  tls {
    cert_file = "%[1]s"
    key_file  = "%[2]s"
  }
  rate_limit {
    requests_per_second = 200
    key                 = "header:x-api-key"
  }
}
upstream "api" {
  route {}
  backend "a" { address = "http://127.0.0.1:9000" }
  rate_limit {
    requests_per_second = 2.5
  }
}
upstream "web" {
  route { path_prefix = "/web" }
  backend "a" { address = "http://127.0.0.1:9000" }
}
`)
	for _, c := range []struct {
		got  *ratelimit.Config
		want ratelimit.Config
	}{
		{gc.Listeners[0].RateLimit, ratelimit.Config{RequestsPerSecond: 200, Burst: 200, Key: "header:x-api-key"}},
		{gc.Upstreams[0].RateLimit, ratelimit.Config{RequestsPerSecond: 2.5, Burst: 3, Key: "client_ip"}},
	} {
		if c.got == nil || *c.got != c.want {
			t.Errorf("rate_limit %+v, want %+v", c.got, c.want)
			continue
		}
		n, err := c.got.Normalize()
		if err != nil || n.Burst != c.want.Burst || n.RequestsPerSecond != c.want.RequestsPerSecond {
			t.Errorf("the gateway reads %+v as %+v, %v", c.want, n, err)
		}
	}
	if gc.Upstreams[1].RateLimit != nil {
		t.Errorf("upstream without rate_limit: %+v", gc.Upstreams[1].RateLimit)
	}
}

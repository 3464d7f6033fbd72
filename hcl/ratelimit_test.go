package hcl

import (
	"testing"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// TestRateLimit: rate_limit blocks of listeners and upstreams are read
// with their defaults (burst one second's worth, key client_ip); without
// the block there is none.
func TestRateLimit(t *testing.T) {
	cfg, diags := Load([]string{"testdata/good/rate_limit.hcl"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	values := func(r *RateLimit) RateLimit {
		if r == nil {
			return RateLimit{}
		}
		if r.Range.Start.Line == 0 {
			t.Errorf("rate_limit %+v has no source range", *r)
		}
		c := *r
		c.Range = hcl2.Range{}
		return c
	}
	if got, want := values(cfg.Listeners[0].RateLimit), (RateLimit{RequestsPerSecond: 200, Burst: 400, Key: "client_ip"}); got != want {
		t.Errorf("listener: %+v, want %+v", got, want)
	}
	want := map[string]RateLimit{
		"api":      {RequestsPerSecond: 50, Burst: 10, Key: "client_ip"},
		"partners": {RequestsPerSecond: 2.5, Burst: 3, Key: "header:x-api-key"},
		"reports":  {RequestsPerSecond: 0.5, Burst: 1, Key: "route"},
	}
	for _, u := range cfg.Upstreams {
		if got := values(u.RateLimit); got != want[u.Name] {
			t.Errorf("upstream %q: %+v, want %+v", u.Name, got, want[u.Name])
		}
	}

	cfg, diags = Load([]string{"testdata/good/minimal.hcl"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if cfg.Listeners[0].RateLimit != nil || cfg.Upstreams[0].RateLimit != nil {
		t.Error("a rate limit without a rate_limit block")
	}
}

func TestCheckRateLimitKey(t *testing.T) {
	for _, ok := range []string{"client_ip", "route", "header:X-Api-Key", "header:x-api-key", "header:a!#$%&'*+-.^_`|~z"} {
		if why := checkRateLimitKey(ok); why != "" {
			t.Errorf("checkRateLimitKey(%q) = %q, want ok", ok, why)
		}
	}
	for _, bad := range []string{"", "client-ip", "Client_IP", "route:x", "header:", "header:a b", "header:host", "header:HOST", "cookie:s", "query:q", "path"} {
		if why := checkRateLimitKey(bad); why == "" {
			t.Errorf("checkRateLimitKey(%q) accepted", bad)
		}
	}
}

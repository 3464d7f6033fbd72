package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// TestEdgeConverted: a route's compress and cors blocks reach the
// gateway's RouteConfig with hcl's defaults, and the gateway takes them;
// a route without them has neither (the stages cost nothing there).
func TestEdgeConverted(t *testing.T) {
	gc := convertedConfig(t, tlsListener+`
upstream "api" {
  route {
    path_prefix = "/api/"
    compress {}
    cors {
      allow_origins = ["https://App.example.com:443"]
      allow_methods = ["GET", "PUT"]
      max_age       = "10m"
    }
  }
  route { path_prefix = "/plain/" }
  backend "a" { address = "http://127.0.0.1:9000" }
}
`)
	api, plain := gc.Upstreams[0].Routes[0], gc.Upstreams[0].Routes[1]
	if c := api.Compress; c == nil || c.MinBytes != 1024 || !slices.Equal(c.Algorithms, []string{"zstd", "br", "gzip"}) ||
		!slices.Equal(c.Types, []string{"application/json", "text/*"}) {
		t.Errorf("compress: %+v", api.Compress)
	}
	if c := api.CORS; c == nil || !slices.Equal(c.AllowOrigins, []string{"https://app.example.com"}) || c.MaxAge != 10*time.Minute ||
		!slices.Equal(c.AllowMethods, []string{"GET", "PUT"}) {
		t.Errorf("cors: %+v", api.CORS)
	}
	if plain.Compress != nil || plain.CORS != nil {
		t.Errorf("a route without the blocks: %+v %+v", plain.Compress, plain.CORS)
	}
	gw, err := gateway.New(gateway.Config{Upstreams: gc.Upstreams})
	if err != nil {
		t.Fatal(err)
	}
	gw.Shutdown(t.Context())
}

// TestRoutingRulesConverted: strip_prefix, prefix_rewrite, header rules
// (an upstream's as its routes' default), a redirect-only upstream and a
// route's timeouts, retry and rate_limit reach the gateway's RouteConfig,
// and the gateway takes them.
func TestRoutingRulesConverted(t *testing.T) {
	gc := convertedConfig(t, tlsListener+`
upstream "api" {
  response_headers { remove = ["Server"] }
  route {
    path_prefix  = "/api/"
    strip_prefix = true
    request_headers { set = { "X-Client" = "{client_ip}" } }
  }
  route {
    path_prefix    = "/v1/"
    prefix_rewrite = "/internal/v1/"
    timeouts { request = "60s" }
    retry { attempts = 3 }
    rate_limit { requests_per_second = 5 }
  }
  backend "a" { address = "http://127.0.0.1:9000" }
}
upstream "moved" {
  route {
    path_prefix = "/old/"
    redirect { to = "https://new.example.com" }
  }
}
`)
	api, v1, moved := gc.Upstreams[0].Routes[0], gc.Upstreams[0].Routes[1], gc.Upstreams[1].Routes[0]
	if !api.Rewrite.StripPrefix || api.RequestHeaders.Set["X-Client"] != "{client_ip}" || !slices.Equal(api.ResponseHeaders.Remove, []string{"Server"}) {
		t.Errorf("/api/: %+v", api)
	}
	if v1.Rewrite.PrefixRewrite != "/internal/v1/" || len(v1.RequestHeaders.Set) != 0 || !slices.Equal(v1.ResponseHeaders.Remove, []string{"Server"}) {
		t.Errorf("/v1/: %+v", v1)
	}
	if v1.Timeouts.Request != time.Minute || v1.Retry == nil || v1.Retry.Attempts != 3 || v1.RateLimit == nil || v1.RateLimit.RequestsPerSecond != 5 ||
		api.Retry != nil || api.RateLimit != nil || api.Timeouts != (gateway.RouteTimeouts{}) {
		t.Errorf("route policies: %+v %+v", v1, api)
	}
	if d := moved.Redirect; d == nil || d.To != "https://new.example.com" || d.Code != 308 || d.StripQuery {
		t.Errorf("redirect: %+v", moved.Redirect)
	}
	gw, err := gateway.New(gateway.Config{Upstreams: gc.Upstreams})
	if err != nil {
		t.Fatal(err)
	}
	gw.Shutdown(t.Context())
}

// TestPathMatchConverted: path and path_regex routes reach the gateway,
// which takes them beside a path_prefix route of the same text, and a
// catalog-style key never confuses them.
func TestPathMatchConverted(t *testing.T) {
	gc := convertedConfig(t, tlsListener+`
upstream "api" {
  route { path = "/api/health" }
  route { path_regex = "/api/users/[0-9]+" }
  route { path_prefix = "/api/health" }
  backend "a" { address = "http://127.0.0.1:9000" }
}
`)
	rs := gc.Upstreams[0].Routes
	if rs[0].Path != "/api/health" || rs[0].PathPrefix != "" || rs[1].PathRegex != "/api/users/[0-9]+" || rs[2].PathPrefix != "/api/health" {
		t.Errorf("routes: %+v", rs)
	}
	if keyOf(hcl.Route{Path: "/a"}) == keyOf(hcl.Route{PathPrefix: "/a"}) || keyOf(hcl.Route{PathRegex: "/a"}) == keyOf(hcl.Route{Path: "/a"}) {
		t.Error("keyOf confuses path kinds")
	}
	gw, err := gateway.New(gateway.Config{Upstreams: gc.Upstreams})
	if err != nil {
		t.Fatal(err)
	}
	gw.Shutdown(t.Context())
}

// TestSplitsConverted: case N04's split blocks and sticky reach the
// gateway's RouteConfig in order, an upstream whose routes only split
// needs no backend, and the gateway takes them; a route without splits
// has none.
func TestSplitsConverted(t *testing.T) {
	gc := convertedConfig(t, tlsListener+`
upstream "web" {
  route {
    path_prefix = "/"
    split {
      upstream = "web-v1"
      weight   = 90
    }
    split {
      upstream = "web-v2"
      weight   = 10
    }
    sticky = "cookie:session"
  }
}
upstream "web-v1" {
  route { path_prefix = "/v1/" }
  backend "a" { address = "http://127.0.0.1:9001" }
}
upstream "web-v2" {
  route { path_prefix = "/v2/" }
  backend "a" { address = "http://127.0.0.1:9002" }
}
`)
	web, v1 := gc.Upstreams[0].Routes[0], gc.Upstreams[1].Routes[0]
	want := []gateway.SplitConfig{{Upstream: "web-v1", Weight: 90}, {Upstream: "web-v2", Weight: 10}}
	if !slices.Equal(web.Splits, want) || web.Sticky != "cookie:session" {
		t.Errorf("splits: %+v, sticky %q", web.Splits, web.Sticky)
	}
	if v1.Splits != nil || v1.Sticky != "" {
		t.Errorf("a route without splits: %+v %q", v1.Splits, v1.Sticky)
	}
	gw, err := gateway.New(gateway.Config{Upstreams: gc.Upstreams})
	if err != nil {
		t.Fatal(err)
	}
	gw.Shutdown(t.Context())
}

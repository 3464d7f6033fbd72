package agent

import (
	"fmt"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/compress"
	"github.com/impulse-agent/impulse-agent/gateway/cors"
	"github.com/impulse-agent/impulse-agent/gateway/headers"
	"github.com/impulse-agent/impulse-agent/gateway/rewrite"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// routeCompress converts a route's compress block (nil: none).
func routeCompress(r hcl.Route) *compress.Config {
	c := r.Compress
	if c == nil {
		return nil
	}
	return &compress.Config{Types: c.Types, MinBytes: c.MinBytes, Algorithms: c.Algorithms}
}

// routeCORS converts a route's cors block (nil: none).
func routeCORS(r hcl.Route) *cors.Config {
	c := r.CORS
	if c == nil {
		return nil
	}
	return &cors.Config{AllowOrigins: c.AllowOrigins, AllowMethods: c.AllowMethods, AllowHeaders: c.AllowHeaders,
		ExposeHeaders: c.ExposeHeaders, MaxAge: c.MaxAge, AllowCredentials: c.AllowCredentials}
}

// routeRedirect converts a route's redirect block (nil: none).
func routeRedirect(r hcl.Route) *rewrite.RedirectConfig {
	d := r.Redirect
	if d == nil {
		return nil
	}
	return &rewrite.RedirectConfig{To: d.To, Code: d.Code, StripQuery: d.StripQuery}
}

// routeHeaders converts a request_headers or response_headers block (nil:
// the zero Config, none).
func routeHeaders(h *hcl.HeaderRules) headers.Config {
	if h == nil {
		return headers.Config{}
	}
	return headers.Config{Set: h.Set, Add: h.Add, Remove: h.Remove}
}

// routePolicies converts a route's timeouts, retry and rate_limit into the
// RouteConfig fields of the same names (nil or zero: the upstream's).
// Errors: retryPolicy's.
func routePolicies(r hcl.Route) (gateway.RouteConfig, error) {
	var rc gateway.RouteConfig
	if t := r.Timeouts; t != nil {
		rc.Timeouts = gateway.RouteTimeouts{Request: t.Request, BodyIdle: t.BodyIdle, ResponseHeader: t.ResponseHeader}
	}
	if r.Retry != nil {
		p, err := retryPolicy(*r.Retry)
		if err != nil {
			return rc, fmt.Errorf("retry: %w", err)
		}
		rc.Retry = &p
	}
	rc.RateLimit = rateLimit(r.RateLimit)
	return rc, nil
}

// routeSplits converts a route's split blocks, in order (nil: none, the
// route's own upstream serves it).
func routeSplits(r hcl.Route) []gateway.SplitConfig {
	if len(r.Splits) == 0 {
		return nil
	}
	out := make([]gateway.SplitConfig, len(r.Splits))
	for i, s := range r.Splits {
		out[i] = gateway.SplitConfig{Upstream: s.Upstream, Weight: s.Weight}
	}
	return out
}

package agent

import (
	"github.com/impulse-agent/impulse-agent/gateway/compress"
	"github.com/impulse-agent/impulse-agent/gateway/cors"
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

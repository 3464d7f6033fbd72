package hcl

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestEdgeBlocks: compress and cors convert with their defaults (an
// empty block takes every one), origins as a browser serializes them.
func TestEdgeBlocks(t *testing.T) {
	cfg := mustParse(t, authUpstream("    compress {}\n    cors {}"))
	rt := cfg.Upstreams[0].Routes[0]
	if c := rt.Compress; c == nil || !slices.Equal(c.Types, []string{"application/json", "text/*"}) || c.MinBytes != 1024 ||
		!slices.Equal(c.Algorithms, []string{"zstd", "br", "gzip"}) {
		t.Errorf("compress {} = %+v", rt.Compress)
	}
	if c := rt.CORS; c == nil || len(c.AllowOrigins)+len(c.AllowMethods)+len(c.AllowHeaders)+len(c.ExposeHeaders) != 0 || c.MaxAge != 0 || c.AllowCredentials {
		t.Errorf("cors {} = %+v", rt.CORS)
	}
	cfg = mustParse(t, authUpstream(`    compress {
      types      = ["application/json", "image/svg+xml", "text/*"]
      min_bytes  = 0
      algorithms = ["gzip"]
    }
    cors {
      allow_origins     = ["https://App.Example.com:443", "http://localhost:3000"]
      allow_methods     = ["GET", "PUT"]
      allow_headers     = ["Content-Type"]
      expose_headers    = ["X-Request-Id"]
      max_age           = "10m"
      allow_credentials = true
    }`))
	rt = cfg.Upstreams[0].Routes[0]
	if c := rt.Compress; len(c.Types) != 3 || c.MinBytes != 0 || !slices.Equal(c.Algorithms, []string{"gzip"}) {
		t.Errorf("compress = %+v", c)
	}
	if c := rt.CORS; !slices.Equal(c.AllowOrigins, []string{"https://app.example.com", "http://localhost:3000"}) ||
		!slices.Equal(c.AllowMethods, []string{"GET", "PUT"}) || c.MaxAge != 10*time.Minute || !c.AllowCredentials ||
		!slices.Equal(c.ExposeHeaders, []string{"X-Request-Id"}) {
		t.Errorf("cors = %+v", c)
	}
	if rt := mustParse(t, authUpstream("")).Upstreams[0].Routes[0]; rt.Compress != nil || rt.CORS != nil {
		t.Errorf("no blocks: %+v %+v", rt.Compress, rt.CORS)
	}
}

// TestEdgeBlockErrors: every bad compress or cors value is an error at
// file:line:column of the value, naming the field.
func TestEdgeBlockErrors(t *testing.T) {
	for _, tc := range []struct {
		body, at, want string
	}{
		{`compress { types = ["json"] }`, `"json"`, `upstream "api" route compress types: "json" is not a media type`},
		{`compress { types = ["*/*"] }`, `"*/*"`, "would compress every response"},
		{`compress { types = ["text/html; charset=utf-8"] }`, `"text/html; charset=utf-8"`, "is not a media type"},
		{`compress { types = [] }`, `[]`, "at least one media type"},
		{`compress { min_bytes = -1 }`, `-1`, "compress min_bytes: -1 is out of range"},
		{`compress { min_bytes = "1k" }`, `"1k"`, "Invalid value type"},
		{`compress { algorithms = ["deflate"] }`, `"deflate"`, `compress algorithms: "deflate" is not an algorithm; use "zstd", "br", "gzip"`},
		{`compress { algorithms = ["gzip", "gzip"] }`, `"gzip"]`, `"gzip" is listed twice`},
		{`compress { algorithms = [] }`, `[]`, "at least one algorithm"},
		{`compress { level = 9 }`, `level`, "Unsupported argument"},
		{"compress {}\n compress {}", "2nd compress {", "Duplicate compress block"},
		{"cors {\n allow_origins = [\"*\"]\n allow_credentials = true\n}", `["*"]`, `cors allow_origins: allow_credentials = true cannot be combined with "*"`},
		{"cors {\n allow_origins = [\"https://a.example\"]\n allow_headers = [\"*\"]\n allow_credentials = true\n}", `["*"]`, "cannot be combined"},
		{"cors {\n allow_origins = [\"https://a.example\"]\n expose_headers = [\"*\"]\n allow_credentials = true\n}", `["*"]`, "cannot be combined"},
		{`cors { allow_origins = ["*", "https://a.example"] }`, `["*"`, "list it alone"},
		{`cors { allow_origins = ["app.example.com"] }`, `"app.example.com"`, "is not an origin"},
		{`cors { allow_origins = ["https://app.example.com/"] }`, `"https://app.example.com/"`, "an origin has no path"},
		{`cors { allow_origins = ["https://*.example.com"] }`, `"https://*.example.com"`, "wildcards are not supported"},
		{`cors { allow_origins = ["null"] }`, `"null"`, "sandboxed"},
		{`cors { allow_origins = ["https://u@a.example"] }`, `"https://u@a.example"`, "no user info"},
		{`cors { allow_origins = ["https://a.example:0"] }`, `"https://a.example:0"`, "invalid port"},
		{`cors { allow_methods = ["TRACE"] }`, `"TRACE"`, "forbidden method"},
		{`cors { allow_methods = ["put"] }`, `"put"`, "methods are case-sensitive"},
		{`cors { allow_methods = ["G T"] }`, `"G T"`, "is not an HTTP method token"},
		{`cors { allow_methods = ["*"] }`, `"*"`, "list them"},
		{`cors { allow_headers = ["X Bad"] }`, `"X Bad"`, `cors allow_headers: "X Bad" is not a field name`},
		{`cors { expose_headers = ["X:Bad"] }`, `"X:Bad"`, "is not a field name"},
		{`cors { max_age = "1500ms" }`, `"1500ms"`, "whole seconds"},
		{`cors { max_age = "48h" }`, `"48h"`, "Duration out of range"},
		{`cors { max_age = "soon" }`, `"soon"`, "is not a duration"},
		{`cors { allow_credentials = "yes" }`, `"yes"`, "Invalid value type"},
		{"cors {}\n cors {}", "2nd cors {", "Duplicate cors block"},
	} {
		src := authUpstream("    " + tc.body)
		wantErrorAt(t, src, tc.at, tc.want, tc.body)
	}
}

// TestFullExampleEdge: full.hcl's route "/app/" writes out compress and
// cors with every default.
func TestFullExampleEdge(t *testing.T) {
	cfg, diags := Load([]string{"testdata/good/full.hcl"})
	if diags.HasErrors() {
		t.Fatal(linesOf(diags))
	}
	rt := cfg.Upstreams[1].Routes[2]
	if c := rt.Compress; c == nil || !slices.Equal(c.Types, DefaultCompressTypes) || c.MinBytes != DefaultCompressMinBytes ||
		!slices.Equal(c.Algorithms, DefaultCompressAlgorithms) {
		t.Errorf("compress = %+v", rt.Compress)
	}
	if c := rt.CORS; c == nil || len(c.AllowOrigins)+len(c.AllowMethods)+len(c.AllowHeaders)+len(c.ExposeHeaders) != 0 || c.MaxAge != 0 || c.AllowCredentials {
		t.Errorf("cors = %+v", rt.CORS)
	}
}

// TestUpstreamEdgeBlocks: an upstream's compress and cors are the default
// of its routes without their own; a route's block replaces it whole.
func TestUpstreamEdgeBlocks(t *testing.T) {
	src := testListener + `upstream "api" {
  compress { algorithms = ["gzip"] }
  cors { allow_origins = ["https://app.example.com"] }
  route { path_prefix = "/a/" }
  route {
    path_prefix = "/b/"
    compress { min_bytes = 0 }
    cors { allow_origins = ["*"] }
  }
  backend "b" { address = "http://127.0.0.1:8080" }
}
`
	u := mustParse(t, src).Upstreams[0]
	a, b := u.Routes[0], u.Routes[1]
	if a.Compress != u.Compress || !slices.Equal(a.Compress.Algorithms, []string{"gzip"}) || a.Compress.MinBytes != 1024 {
		t.Errorf("route /a/ compress = %+v", a.Compress)
	}
	if a.CORS != u.CORS || !slices.Equal(a.CORS.AllowOrigins, []string{"https://app.example.com"}) {
		t.Errorf("route /a/ cors = %+v", a.CORS)
	}
	if !slices.Equal(b.Compress.Algorithms, DefaultCompressAlgorithms) || b.Compress.MinBytes != 0 || !slices.Equal(b.CORS.AllowOrigins, []string{"*"}) {
		t.Errorf("route /b/: %+v %+v", b.Compress, b.CORS)
	}
	bad := testListener + `upstream "api" {
  cors {
    allow_origins     = ["*"]
    allow_credentials = true
  }
  route {}
  backend "b" { address = "http://127.0.0.1:8080" }
}
`
	_, diags := Parse("a.hcl", []byte(bad))
	if got := linesOf(diags); !strings.Contains(got, "a.hcl:"+posOf(bad, `["*"]`)+": ") || !strings.Contains(got, `upstream "api" cors allow_origins: allow_credentials = true cannot be combined`) {
		t.Errorf("upstream cors with credentials and *:\n%s", got)
	}
}

package hcl

import (
	"fmt"
	"math"
	"strings"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"

	"github.com/impulse-agent/impulse-agent/internal/edgerules"
)

// A route's response stages (README "Compression", "CORS"): the compress
// and cors blocks of upstream.route. Checked here with the rules the
// gateway applies (internal/edgerules), so a config that validates is one
// the gateway takes.

// Defaults of the compress block (the gateway's compress.Default*, which
// hcl cannot import).
var (
	DefaultCompressTypes      = []string{"application/json", "text/*"}
	DefaultCompressAlgorithms = []string{"zstd", "br", "gzip"}
)

// DefaultCompressMinBytes is compress.min_bytes's default: below 1 KiB the
// coding's framing and the work cost more than the bytes saved.
const DefaultCompressMinBytes = 1024

// MaxCORSMaxAge bounds cors.max_age: browsers cap it anyway (Firefox 24
// hours, Chromium 2 hours).
const MaxCORSMaxAge = 24 * time.Hour

// compressAlgorithms are the accepted compress.algorithms values.
var compressAlgorithms = []string{"zstd", "br", "gzip"}

// rawCompress is upstream.route.compress.
type rawCompress struct {
	DefRange   hcl2.Range      `hcl:",def_range"`
	Types      *hcl2.Attribute `hcl:"types,optional"`
	MinBytes   *hcl2.Attribute `hcl:"min_bytes,optional"`
	Algorithms *hcl2.Attribute `hcl:"algorithms,optional"`
}

// rawCORS is upstream.route.cors.
type rawCORS struct {
	DefRange         hcl2.Range      `hcl:",def_range"`
	AllowOrigins     *hcl2.Attribute `hcl:"allow_origins,optional"`
	AllowMethods     *hcl2.Attribute `hcl:"allow_methods,optional"`
	AllowHeaders     *hcl2.Attribute `hcl:"allow_headers,optional"`
	ExposeHeaders    *hcl2.Attribute `hcl:"expose_headers,optional"`
	MaxAge           *hcl2.Attribute `hcl:"max_age,optional"`
	AllowCredentials *hcl2.Attribute `hcl:"allow_credentials,optional"`
}

func (r *rawCompress) defRange() hcl2.Range { return r.DefRange }
func (r *rawCORS) defRange() hcl2.Range     { return r.DefRange }

// Compress is upstream.route.compress: the route's responses are encoded
// for clients that accept it.
type Compress struct {
	// Types are the media types compressed, "type/subtype" or "type/*"
	// (DefaultCompressTypes when absent).
	Types []string
	// MinBytes: responses with a smaller Content-Length are sent as they
	// are (bytes, default 1024; 0: any size).
	MinBytes int64
	// Algorithms are the codings offered, most preferred first ("zstd",
	// "br", "gzip"; DefaultCompressAlgorithms when absent).
	Algorithms []string
}

// CORS is upstream.route.cors: the route's CORS policy (Fetch standard).
type CORS struct {
	// AllowOrigins are origins ("scheme://host[:port]", as a browser
	// serializes them: lower-case, without the default port) or ["*"].
	AllowOrigins []string
	// AllowMethods are methods allowed besides GET, HEAD and POST.
	AllowMethods []string
	// AllowHeaders are request fields a preflight allows; ExposeHeaders
	// response fields scripts may read (either may be ["*"] without
	// credentials).
	AllowHeaders, ExposeHeaders []string
	// MaxAge is Access-Control-Max-Age (whole seconds, 0..24h; 0: not sent).
	MaxAge time.Duration
	// AllowCredentials sends Access-Control-Allow-Credentials: true.
	AllowCredentials bool
}

// buildUpstreamEdge converts an upstream's compress and cors blocks into
// u, and gives them to each of its routes without a block of its own (a
// route's block replaces the upstream's whole, arguments not merged).
func buildUpstreamEdge(b blk, r *rawUpstream, u *Upstream) {
	if c := one(r.Compresses, b.path, "compress", b.diags); c != nil {
		u.Compress = buildCompress(b.child("compress", c.DefRange), c)
	}
	if c := one(r.CORSs, b.path, "cors", b.diags); c != nil {
		u.CORS = buildCORS(b.child("cors", c.DefRange), c)
	}
	for i := range u.Routes {
		rt := &u.Routes[i]
		if rt.Compress == nil {
			rt.Compress = u.Compress
		}
		if rt.CORS == nil {
			rt.CORS = u.CORS
		}
	}
}

// buildRouteEdge converts a route's compress and cors blocks into rt.
func buildRouteEdge(b blk, r *rawRoute, rt *Route) {
	if c := one(r.Compresses, b.path, "compress", b.diags); c != nil {
		rt.Compress = buildCompress(b.child("compress", c.DefRange), c)
	}
	if c := one(r.CORSs, b.path, "cors", b.diags); c != nil {
		rt.CORS = buildCORS(b.child("cors", c.DefRange), c)
	}
}

func buildCompress(b blk, r *rawCompress) *Compress {
	c := &Compress{Types: DefaultCompressTypes, MinBytes: DefaultCompressMinBytes, Algorithms: DefaultCompressAlgorithms}
	if r.Types != nil {
		before := b.errCount()
		c.Types = b.strList(r.Types, edgerules.CheckMediaType)
		if len(c.Types) == 0 && b.errCount() == before {
			b.errorf(r.Types, "", "Invalid types", "at least one media type is needed; to compress nothing, remove the compress block.")
		}
	}
	n, _ := b.integer(r.MinBytes, DefaultCompressMinBytes, 0, math.MaxInt32)
	c.MinBytes = int64(n)
	if r.Algorithms != nil {
		before := b.errCount()
		seen := map[string]bool{}
		c.Algorithms = b.strList(r.Algorithms, func(a string) string {
			switch {
			case !contains(compressAlgorithms, a):
				return fmt.Sprintf("%q is not an algorithm; use %s", a, strings.Join(quoteAll(compressAlgorithms), ", "))
			case seen[a]:
				return fmt.Sprintf("%q is listed twice", a)
			}
			seen[a] = true
			return ""
		})
		if len(c.Algorithms) == 0 && b.errCount() == before {
			b.errorf(r.Algorithms, "", "Invalid algorithms", "at least one algorithm is needed; to compress nothing, remove the compress block.")
		}
	}
	return c
}

func buildCORS(b blk, r *rawCORS) *CORS {
	c := &CORS{}
	c.AllowOrigins = b.strList(r.AllowOrigins, func(o string) string {
		if o == "*" {
			return ""
		}
		_, why := edgerules.CheckOrigin(o)
		return why
	})
	for i, o := range c.AllowOrigins {
		if o != "*" {
			c.AllowOrigins[i], _ = edgerules.CheckOrigin(o) // as a browser sends it
		}
	}
	if contains(c.AllowOrigins, "*") && len(c.AllowOrigins) > 1 {
		b.errorf(r.AllowOrigins, "", "Invalid allow_origins", "\"*\" allows every origin: list it alone, or list origins without it.")
	}
	c.AllowMethods = b.strList(r.AllowMethods, edgerules.CheckMethod)
	header := func(h string) string {
		if h == "*" {
			return ""
		}
		return edgerules.CheckHeader(h)
	}
	c.AllowHeaders = b.strList(r.AllowHeaders, header)
	c.ExposeHeaders = b.strList(r.ExposeHeaders, header)
	maxAge := b.duration(r.MaxAge, 0, 0, MaxCORSMaxAge)
	if maxAge%time.Second != 0 {
		b.errorf(r.MaxAge, "", "Invalid max_age", "Access-Control-Max-Age is whole seconds; got %s.", maxAge)
		maxAge = maxAge.Truncate(time.Second)
	}
	c.MaxAge = maxAge
	c.AllowCredentials = b.boolean(r.AllowCredentials, false)
	if c.AllowCredentials {
		// The Fetch standard ignores "*" on a request with credentials
		// ("CORS protocol and credentials"): the browser would refuse every
		// such response.
		for _, f := range []struct {
			a    *hcl2.Attribute
			list []string
		}{{r.AllowOrigins, c.AllowOrigins}, {r.AllowHeaders, c.AllowHeaders}, {r.ExposeHeaders, c.ExposeHeaders}} {
			if contains(f.list, "*") {
				b.errorf(f.a, "", "Credentials with a wildcard",
					"allow_credentials = true cannot be combined with \"*\": browsers ignore \"*\" on a request with credentials (Fetch standard, CORS protocol and credentials); list the values.")
			}
		}
	}
	return c
}

func quoteAll(list []string) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

package compress

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/impulse-agent/impulse-agent/internal/edgerules"
)

// Defaults of a compress block (README "Compression").
const (
	// DefaultMinBytes: below 1 KiB the coding's framing and the extra
	// round of work cost more than the few bytes saved (a body that fits
	// one packet either way).
	DefaultMinBytes = 1024
)

// DefaultTypes are the media types compressed when a block lists none:
// JSON and text, the responses of APIs and pages that compress well;
// images, video and archives are compressed already.
var DefaultTypes = []string{"application/json", "text/*"}

// DefaultAlgorithms are the codings offered when a block lists none, in
// the gateway's order of preference: zstd (fastest at a given ratio), br
// (the best ratio for text, every browser), gzip (every client).
var DefaultAlgorithms = []string{"zstd", "br", "gzip"}

// Config is a route's compress block.
type Config struct {
	// Types are the media types compressed: "type/subtype" or "type/*"
	// (case-insensitive, parameters ignored); nil means DefaultTypes.
	Types []string
	// MinBytes: a response whose Content-Length is below it is passed as
	// it is (one without a length is compressed); 0 compresses every size.
	MinBytes int64
	// Algorithms are the codings offered, most preferred first: "zstd",
	// "br", "gzip"; nil means DefaultAlgorithms.
	Algorithms []string
}

// Policy is a compiled Config: Decide answers for one response. Safe for
// concurrent use; never modified once built.
type Policy struct {
	exact    []string // lower-case "type/subtype"
	prefixes []string // lower-case "type/" of "type/*"
	offered  []Coding
	minBytes int64
}

// New compiles c. Errors: a media type that is not "type/subtype" or
// "type/*", an unknown or repeated algorithm, a negative MinBytes (the
// agent's checks at load make them a bug).
func New(c Config) (*Policy, error) {
	p := &Policy{minBytes: c.MinBytes}
	if c.MinBytes < 0 {
		return nil, fmt.Errorf("compress: min_bytes %d is negative", c.MinBytes)
	}
	types := c.Types
	if types == nil {
		types = DefaultTypes
	}
	for _, t := range types {
		if why := edgerules.CheckMediaType(t); why != "" {
			return nil, errors.New("compress: " + why)
		}
		t = strings.ToLower(t)
		if strings.HasSuffix(t, "/*") {
			p.prefixes = append(p.prefixes, t[:len(t)-1])
		} else {
			p.exact = append(p.exact, t)
		}
	}
	algs := c.Algorithms
	if algs == nil {
		algs = DefaultAlgorithms
	}
	for _, a := range algs {
		cd, ok := ParseCoding(a)
		if !ok {
			return nil, fmt.Errorf("compress: unknown algorithm %q", a)
		}
		for _, o := range p.offered {
			if o == cd {
				return nil, fmt.Errorf("compress: algorithm %q listed twice", a)
			}
		}
		p.offered = append(p.offered, cd)
	}
	return p, nil
}

// Decision is the outcome of Decide for one response.
type Decision struct {
	// Coding is the coding to apply (None: pass the body as it is).
	Coding Coding
	// Vary: the response is of a type the route compresses, so what it
	// would be depends on Accept-Encoding (Vary: Accept-Encoding, RFC 9110
	// §12.5.5), whether or not this one is encoded.
	Vary bool
}

// Decide says how to send a response to a request with method and
// Accept-Encoding values accept (nil: absent): its status, fields h and
// body length (-1: unknown). It is a pure function. A response is never
// encoded when:
//   - the request is HEAD, or the status is 1xx, 204, 206 or 304 (no
//     body, or a range of the identity body);
//   - it has Content-Range (a range), a Content-Encoding other than
//     identity (already encoded), Cache-Control: no-transform (RFC 9110
//     §7.7, RFC 9111 §5.2.2.6), or a digest of its content (Content-Digest,
//     Repr-Digest, Digest: RFC 9530, which encoding would falsify);
//   - its media type is text/event-stream (SSE, whose events must not wait
//     in an encoder) or application/grpc* (gRPC has its own), absent, or
//     not one of the route's types;
//   - its length is known and below MinBytes, unless the client refused
//     identity ("identity;q=0");
//   - Negotiate finds no coding the client accepts.
func (p *Policy) Decide(method string, accept []string, status int, h http.Header, length int64) Decision {
	if p == nil || method == http.MethodHead || status < 200 || status == http.StatusNoContent ||
		status == http.StatusPartialContent || status == http.StatusNotModified {
		return Decision{}
	}
	if ce := h["Content-Encoding"]; len(ce) > 0 && !(len(ce) == 1 && (ce[0] == "" || equalFold(ce[0], "identity"))) {
		return Decision{}
	}
	if _, ok := h["Content-Range"]; ok {
		return Decision{}
	}
	for _, k := range [...]string{"Content-Digest", "Repr-Digest", "Digest"} {
		if _, ok := h[k]; ok {
			return Decision{}
		}
	}
	if httpguts.HeaderValuesContainsToken(h["Cache-Control"], "no-transform") {
		return Decision{}
	}
	ct := h["Content-Type"]
	if len(ct) == 0 || !p.compresses(mediaType(ct[0])) {
		return Decision{}
	}
	c, identityRefused := Negotiate(accept, p.offered)
	if c == None || (length >= 0 && length < p.minBytes && !identityRefused) {
		return Decision{Vary: true}
	}
	return Decision{Coding: c, Vary: true}
}

// compresses reports whether the lower- or mixed-case media type mt is one
// of p's types; never SSE nor gRPC.
func (p *Policy) compresses(mt string) bool {
	if equalFold(mt, "text/event-stream") || (len(mt) >= 16 && equalFold(mt[:16], "application/grpc")) {
		return false
	}
	for _, t := range p.exact {
		if equalFold(mt, t) {
			return true
		}
	}
	for _, pre := range p.prefixes {
		if len(mt) > len(pre) && equalFold(mt[:len(pre)], pre) {
			return true
		}
	}
	return false
}

// mediaType is the type/subtype of a Content-Type value, without
// parameters or whitespace.
func mediaType(v string) string {
	if i := indexByte(v, ';'); i >= 0 {
		v = v[:i]
	}
	return trimOWS(v)
}

// Field values Apply sets, shared (never modified).
var (
	codingValues = [numCodings][]string{None: nil, Zstd: {"zstd"}, Brotli: {"br"}, Gzip: {"gzip"}}
	varyAE       = []string{"Accept-Encoding"}
)

// Apply changes the response fields h for d: Vary gets Accept-Encoding
// (unless it has it, or "*"); an encoded response gets Content-Encoding,
// loses Content-Length (the encoded length is not known before the end)
// and Accept-Ranges (ranges would be of the identity body), and a strong
// ETag is weakened with "W/" (RFC 9110 §8.8.3: a strong validator names
// exact bytes, and these are new ones; a weak one still validates the
// same content).
func Apply(h http.Header, d Decision) {
	if d.Vary {
		switch v := h["Vary"]; {
		case len(v) == 0:
			h["Vary"] = varyAE
		case httpguts.HeaderValuesContainsToken(v, "Accept-Encoding") || httpguts.HeaderValuesContainsToken(v, "*"):
		default:
			h["Vary"] = append(v[:len(v):len(v)], "Accept-Encoding")
		}
	}
	if d.Coding == None || d.Coding >= numCodings {
		return
	}
	h["Content-Encoding"] = codingValues[d.Coding]
	delete(h, "Content-Length")
	delete(h, "Accept-Ranges")
	if et := h["Etag"]; len(et) == 1 && !strings.HasPrefix(et[0], "W/") && et[0] != "" {
		h["Etag"] = []string{"W/" + et[0]}
	}
}

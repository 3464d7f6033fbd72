package hcl

import (
	"math/big"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// Defaults of the tracing block (interface.md).
const (
	DefaultTracingProtocol    = "grpc"
	DefaultTracingServiceName = "impulse-agent"
	DefaultTracingSampleRatio = 1.0
)

// Tracing is the top-level tracing block: OpenTelemetry spans exported
// over OTLP (README "Tracing"). Comparable: == tells whether a reload
// changed it.
type Tracing struct {
	// OTLPEndpoint is otlp_endpoint as written (scheme and path included),
	// for messages.
	OTLPEndpoint string
	// Endpoint is host:port of the OTLP receiver (otlp_endpoint, required),
	// without scheme or path.
	Endpoint string
	// TLS is true when otlp_endpoint starts with "https://": the exporter
	// then verifies the collector's certificate against the system roots.
	// Without a scheme, or with "http://", OTLP goes in plaintext (a
	// collector on the same host or network).
	TLS bool
	// URLPath is the path of an OTLP/HTTP endpoint URL ("" means the
	// exporter's default, /v1/traces); only with protocol = "http".
	URLPath string
	// Protocol is "grpc" (OTLP/gRPC, default; port 4317 by convention) or
	// "http" (OTLP/HTTP protobuf; port 4318).
	Protocol string
	// SampleRatio is the share of new traces recorded, 0..1 (default 1): a
	// request with a parent traceparent follows its parent's sampled flag.
	SampleRatio float64
	// ServiceName is the service.name resource attribute (default
	// "impulse-agent"); not empty.
	ServiceName string
}

// rawTracing is the top-level tracing block.
type rawTracing struct {
	DefRange hcl2.Range `hcl:",def_range"`

	OTLPEndpoint *hcl2.Attribute `hcl:"otlp_endpoint,optional"`
	Protocol     *hcl2.Attribute `hcl:"protocol,optional"`
	SampleRatio  *hcl2.Attribute `hcl:"sample_ratio,optional"`
	ServiceName  *hcl2.Attribute `hcl:"service_name,optional"`
}

func (r *rawTracing) defRange() hcl2.Range { return r.DefRange }

// buildTracing converts the tracing block (nil: tracing off).
func buildTracing(top blk, r *rawTracing) *Tracing {
	if r == nil {
		return nil
	}
	b := top.child("tracing", r.DefRange)
	t := &Tracing{Protocol: b.oneOf(r.Protocol, DefaultTracingProtocol, "grpc", "http")}
	if r.OTLPEndpoint == nil {
		b.errorf(nil, "otlp_endpoint", "Missing required argument",
			"the OTLP receiver's host:port is required, e.g. \"127.0.0.1:4317\".")
	} else if s, ok := b.strOK(r.OTLPEndpoint, ""); ok {
		b.otlpEndpoint(r.OTLPEndpoint, s, t)
	}
	t.SampleRatio = b.ratio(r.SampleRatio, DefaultTracingSampleRatio)
	t.ServiceName = b.str(r.ServiceName, DefaultTracingServiceName)
	if r.ServiceName != nil && strings.TrimSpace(t.ServiceName) == "" {
		b.errorf(r.ServiceName, "", "Invalid value", "must not be empty.")
	}
	return t
}

// otlpEndpoint parses otlp_endpoint s into t: host:port, optionally after
// "http://" or "https://", and (protocol "http" only) a path.
func (b blk) otlpEndpoint(a *hcl2.Attribute, s string, t *Tracing) {
	rest := s
	switch {
	case strings.HasPrefix(s, "https://"):
		t.TLS, rest = true, s[len("https://"):]
	case strings.HasPrefix(s, "http://"):
		rest = s[len("http://"):]
	case strings.Contains(s, "://"):
		b.errorf(a, "", "Invalid address", "%q: the scheme must be http:// or https:// (or none: plaintext).", s)
		return
	}
	hostPort, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		hostPort, path = rest[:i], rest[i:]
	}
	if why := checkHostPort(hostPort, false, false); why != "" {
		b.errorf(a, "", "Invalid address", "%s.", why)
		return
	}
	if path == "/" {
		path = ""
	}
	if path != "" && t.Protocol != "http" {
		b.errorf(a, "", "Invalid address", "%q: a path is only allowed with protocol = \"http\" (OTLP/gRPC has none).", s)
		return
	}
	if strings.ContainsAny(path, "?# ") {
		b.errorf(a, "", "Invalid address", "%q: the path must not have a query, fragment or space.", s)
		return
	}
	t.OTLPEndpoint, t.Endpoint, t.URLPath = s, hostPort, path
}

// ratio returns the number value of a in [0, 1], or def (absent or
// invalid, with an error for a value outside the range).
func (b blk) ratio(a *hcl2.Attribute, def float64) float64 {
	if a == nil {
		return def
	}
	v, ok := b.value(a, cty.Number)
	if !ok {
		return def
	}
	f := v.AsBigFloat()
	if f.Sign() < 0 || f.Cmp(big.NewFloat(1)) > 0 {
		b.errorf(a, "", "Value out of range", "%s is out of range (0..1).", f.Text('g', 6))
		return def
	}
	x, _ := f.Float64()
	return x
}

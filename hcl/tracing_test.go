package hcl

import (
	"strings"
	"testing"
)

const tracingBase = `
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}
upstream "web" {
  route {}
  backend "a" { address = "http://127.0.0.1:8080" }
}
`

// TestTracingBlock: defaults, every argument, the endpoint forms (bare
// host:port is plaintext, https:// is TLS, a path only for OTLP/HTTP), and
// no block at all meaning tracing off.
func TestTracingBlock(t *testing.T) {
	cases := []struct {
		name, block string
		want        *Tracing
		err         string
	}{
		{"absent", ``, nil, ""},
		{"defaults", `tracing { otlp_endpoint = "127.0.0.1:4317" }`,
			&Tracing{OTLPEndpoint: "127.0.0.1:4317", Endpoint: "127.0.0.1:4317", Protocol: "grpc", SampleRatio: 1, ServiceName: "impulse-agent"}, ""},
		{"all", `tracing {
  otlp_endpoint = "collector.internal:4318"
  protocol      = "http"
  sample_ratio  = 0.25
  service_name  = "edge"
}`, &Tracing{OTLPEndpoint: "collector.internal:4318", Endpoint: "collector.internal:4318", Protocol: "http", SampleRatio: 0.25, ServiceName: "edge"}, ""},
		{"https and path", `tracing {
  otlp_endpoint = "https://otel.example.com:443/otlp/v1/traces"
  protocol      = "http"
}`, &Tracing{OTLPEndpoint: "https://otel.example.com:443/otlp/v1/traces", Endpoint: "otel.example.com:443", TLS: true, URLPath: "/otlp/v1/traces", Protocol: "http", SampleRatio: 1, ServiceName: "impulse-agent"}, ""},
		{"http scheme grpc", `tracing {
  otlp_endpoint = "http://[::1]:4317"
  sample_ratio  = 0
}`, &Tracing{OTLPEndpoint: "http://[::1]:4317", Endpoint: "[::1]:4317", Protocol: "grpc", SampleRatio: 0, ServiceName: "impulse-agent"}, ""},
		{"no port", `tracing { otlp_endpoint = "collector" }`, nil, `tracing otlp_endpoint: "collector" is not host:port`},
		{"other scheme", `tracing { otlp_endpoint = "grpc://127.0.0.1:4317" }`, nil, "the scheme must be http:// or https://"},
		{"ratio type", `tracing {
  otlp_endpoint = "127.0.0.1:4317"
  sample_ratio  = "half"
}`, nil, "tracing sample_ratio"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, diags := Parse("tracing.hcl", []byte(c.block+tracingBase))
			if c.err != "" {
				if !diags.HasErrors() || !strings.Contains(diags.Error(), c.err) {
					t.Fatalf("diagnostics %v, want one with %q", diags, c.err)
				}
				if !strings.Contains(diags.Error(), "tracing.hcl:") {
					t.Errorf("no file:line in %v", diags)
				}
				return
			}
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			switch {
			case c.want == nil && cfg.Tracing != nil:
				t.Errorf("tracing %+v, want nil (off)", *cfg.Tracing)
			case c.want != nil && (cfg.Tracing == nil || *cfg.Tracing != *c.want):
				t.Errorf("tracing %+v, want %+v", cfg.Tracing, *c.want)
			}
		})
	}
}

package gateway

import (
	"bytes"
	"net/http"
	"net/url"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// BenchmarkHandlerRateLimited is BenchmarkHandler with a client_ip rate
// limit that admits every request: the rate-limit step's cost on the whole
// path (compare with BenchmarkHandler; no allocation of its own).
func BenchmarkHandlerRateLimited(b *testing.B) {
	mem := memBackend{body: bytes.Repeat([]byte("x"), 64)}
	uc := UpstreamConfig{Config: upstream.Config{Name: "web",
		NewTransport: func(transport.Options) (transport.RoundTripper, error) { return mem, nil }},
		Routes:    []RouteConfig{{PathPrefix: "/"}},
		Static:    []upstream.Spec{{ID: "a", Scheme: "http", Host: "127.0.0.1", Port: 1, Weight: 1}},
		RateLimit: &ratelimit.Config{RequestsPerSecond: ratelimit.MaxRequestsPerSecond, Burst: 1 << 30}}
	g, err := New(Config{Upstreams: []UpstreamConfig{uc}})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Shutdown(b.Context())
	h := g.handlerFor("bench")
	u, _ := url.Parse("https://example.com/small?x=1")
	b.ReportAllocs()
	for b.Loop() {
		r := &http.Request{Method: "GET", URL: u, RequestURI: "/small?x=1", Host: "example.com", Proto: "HTTP/3.0", ProtoMajor: 3,
			Header:     http.Header{"Accept": {"*/*"}, "User-Agent": {"bench"}},
			RemoteAddr: "127.0.0.1:40000", ContentLength: 0, Body: http.NoBody}
		r = r.WithContext(b.Context())
		h.ServeHTTP(&discardWriter{h: http.Header{}}, r)
	}
}

package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// BenchmarkHandlerAccessLog is BenchmarkHandler with the access log on,
// its lines formatted and discarded by the writer goroutine.
func BenchmarkHandlerAccessLog(b *testing.B) {
	mem := memBackend{body: bytes.Repeat([]byte("x"), 64)}
	uc := UpstreamConfig{Config: upstream.Config{Name: "web",
		NewTransport: func(transport.Options) (transport.RoundTripper, error) { return mem, nil }},
		Routes: []RouteConfig{{PathPrefix: "/"}},
		Static: []upstream.Spec{{ID: "a", Scheme: "http", Host: "127.0.0.1", Port: 1, Weight: 1}}}
	g, err := New(Config{Upstreams: []UpstreamConfig{uc}, AccessLog: &accesslog.Config{Writer: io.Discard}})
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
		h.ServeHTTP(&discardWriter{h: http.Header{}}, r.WithContext(b.Context()))
	}
	dropped := g.obs.Metrics.AccessLogDropped()
	b.ReportMetric(float64(dropped)/float64(b.N), "dropped/op")
}

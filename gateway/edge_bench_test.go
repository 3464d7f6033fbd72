package gateway

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/compress"
	"github.com/impulse-agent/impulse-agent/gateway/cors"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// jsonBackend answers every request with a fixed JSON body, in memory.
type jsonBackend struct{ body []byte }

func (m jsonBackend) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode:    200,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(m.body))}, "Etag": {`"v1"`}},
		Body:          io.NopCloser(bytes.NewReader(m.body)),
		ContentLength: int64(len(m.body)),
	}, nil
}

func (jsonBackend) CloseIdleConnections() {}

// BenchmarkHandlerCompress is the whole handler relaying N07's 100 KB
// JSON response from an in-memory backend on a route with compress {},
// for a client that accepts one coding (identity: none): MB/s is of the
// JSON relayed, per coding, next to the cost of relaying it as it is.
func BenchmarkHandlerCompress(b *testing.B) {
	mem := jsonBackend{body: n07JSON}
	for _, accept := range []string{"identity", "zstd", "br", "gzip"} {
		b.Run(accept, func(b *testing.B) {
			uc := UpstreamConfig{Config: upstream.Config{Name: "web",
				NewTransport: func(transport.Options) (transport.RoundTripper, error) { return mem, nil }},
				Routes: []RouteConfig{{PathPrefix: "/", Compress: &compress.Config{}}},
				Static: []upstream.Spec{{ID: "a", Scheme: "http", Host: "127.0.0.1", Port: 1, Weight: 1}}}
			_, h := benchGateway(b, Config{Upstreams: []UpstreamConfig{uc}})
			b.SetBytes(int64(len(n07JSON)))
			b.ReportAllocs()
			for b.Loop() {
				r := benchRequest()
				r.Header["Accept-Encoding"] = []string{accept}
				h.ServeHTTP(&discardWriter{h: http.Header{}}, r.WithContext(b.Context()))
			}
		})
	}
}

// BenchmarkHandlerCORS is BenchmarkHandler on a route with a cors block,
// for a request from an allowed origin: the cost of the CORS fields.
func BenchmarkHandlerCORS(b *testing.B) {
	uc := memUpstream(2)
	uc.Routes[0].CORS = &cors.Config{AllowOrigins: []string{"https://app.example.com"}, ExposeHeaders: []string{"X-Request-Id"}}
	_, h := benchGateway(b, Config{Upstreams: []UpstreamConfig{uc}})
	b.ReportAllocs()
	for b.Loop() {
		r := benchRequest()
		r.Header["Origin"] = []string{"https://app.example.com"}
		h.ServeHTTP(&discardWriter{h: http.Header{}}, r.WithContext(b.Context()))
	}
}

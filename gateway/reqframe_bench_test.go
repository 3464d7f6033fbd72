package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// eofBody is the body quic-go gives a request whose stream ended with its
// HEADERS frame: no length, io.EOF at once.
type eofBody struct{}

func (eofBody) Read([]byte) (int, error) { return 0, io.EOF }
func (eofBody) Close() error             { return nil }

// h3Writer is discardWriter with the HTTP/3 writer's read deadline.
type h3Writer struct{ discardWriter }

func (*h3Writer) SetReadDeadline(time.Time) error { return nil }

// BenchmarkHandlerH3GET is BenchmarkHandler with a GET as quic-go delivers
// it: ContentLength -1 and a body that is already at its end.
func BenchmarkHandlerH3GET(b *testing.B) {
	mem := memBackend{body: bytes.Repeat([]byte("x"), 64)}
	uc := UpstreamConfig{Config: upstream.Config{Name: "web",
		NewTransport: func(transport.Options) (transport.RoundTripper, error) { return mem, nil }},
		Routes: []RouteConfig{{PathPrefix: "/"}},
		Static: []upstream.Spec{{ID: "a", Scheme: "http", Host: "127.0.0.1", Port: 1, Weight: 1}}}
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
			RemoteAddr: "127.0.0.1:40000", ContentLength: -1, Body: eofBody{}}
		h.ServeHTTP(&h3Writer{discardWriter{h: http.Header{}}}, r.WithContext(b.Context()))
	}
}

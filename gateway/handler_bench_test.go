package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
	gmprom "github.com/hashicorp/go-metrics/prometheus"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// memBackend answers every request with a fixed 64-byte body, in memory.
type memBackend struct{ body []byte }

func (m memBackend) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		StatusCode:    200,
		Header:        http.Header{"Content-Type": {"text/plain"}, "Content-Length": {"64"}},
		Body:          io.NopCloser(bytes.NewReader(m.body)),
		ContentLength: int64(len(m.body)),
	}, nil
}

func (memBackend) CloseIdleConnections() {}

// memUpstream is the "web" upstream of the handler benchmarks: every path,
// to n backends (ids a, b, ...) reached through one memBackend, so that a
// benchmark measures the gateway and no network.
func memUpstream(n int) UpstreamConfig {
	mem := memBackend{body: bytes.Repeat([]byte("x"), 64)}
	uc := UpstreamConfig{Config: upstream.Config{Name: "web",
		NewTransport: func(transport.Options) (transport.RoundTripper, error) { return mem, nil }},
		Routes: []RouteConfig{{PathPrefix: "/"}}}
	for i := range n {
		uc.Static = append(uc.Static, upstream.Spec{ID: string(rune('a' + i)), Scheme: "http", Host: "127.0.0.1", Port: i + 1, Weight: 1})
	}
	return uc
}

// benchGateway is a gateway built from cfg, shut down at the end of the
// benchmark (or test), and its handler for a listener named "bench".
func benchGateway(tb testing.TB, cfg Config) (*Gateway, http.Handler) {
	g, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Shutdown(context.Background()) })
	return g, g.handlerFor("bench")
}

// benchURL is the target of benchRequest.
var benchURL, _ = url.Parse("https://example.com/small?x=1")

// benchRequest is the GET the handler benchmarks send, as the HTTP/3
// server hands it over (a fresh one per request: the pipeline may change
// its fields). It has no context yet: each benchmark adds it as it always
// did, since where it does decides whether the literal itself lands on
// the heap, and so the allocations per request a benchmark has reported
// all along (BenchmarkHandler: 27).
func benchRequest() *http.Request {
	return &http.Request{Method: "GET", URL: benchURL, RequestURI: "/small?x=1", Host: "example.com", Proto: "HTTP/3.0", ProtoMajor: 3,
		Header:     http.Header{"Accept": {"*/*"}, "User-Agent": {"bench"}},
		RemoteAddr: "127.0.0.1:40000", ContentLength: 0, Body: http.NoBody}
}

// discardWriter is a minimal http.ResponseWriter with Flush.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}

// BenchmarkHandler measures the whole request path — route lookup, pick,
// header conversion, round trip to an in-memory backend, response copy and
// metrics — without QUIC.
func BenchmarkHandler(b *testing.B) { benchHandler(b, nil, false) }

// BenchmarkHandlerH3GET is BenchmarkHandler with a GET as quic-go delivers
// it: ContentLength -1 and a body that is already at its end.
func BenchmarkHandlerH3GET(b *testing.B) { benchHandler(b, nil, true) }

// eofBody is the body quic-go gives a request whose stream ended with its
// HEADERS frame: no length, io.EOF at once.
type eofBody struct{}

func (eofBody) Read([]byte) (int, error) { return 0, io.EOF }
func (eofBody) Close() error             { return nil }

// h3Writer is discardWriter with the HTTP/3 writer's read deadline.
type h3Writer struct{ discardWriter }

func (*h3Writer) SetReadDeadline(time.Time) error { return nil }

// benchHandler runs GETs through the handler; h3 sends them as quic-go
// delivers them (see BenchmarkHandlerH3GET).
func benchHandler(b *testing.B, m *metrics.Metrics, h3 bool) {
	benchHandlerConfig(b, Config{Metrics: m}, h3)
}

// benchHandlerConfig is benchHandler with more of the gateway's Config
// (its upstreams are the benchmark's).
func benchHandlerConfig(b *testing.B, cfg Config, h3 bool) {
	cfg.Upstreams = []UpstreamConfig{memUpstream(2)}
	_, h := benchGateway(b, cfg)
	b.ReportAllocs()
	for b.Loop() {
		r := benchRequest()
		r = r.WithContext(b.Context())
		if h3 {
			r.ContentLength, r.Body = -1, eofBody{}
			h.ServeHTTP(&h3Writer{discardWriter{h: http.Header{}}}, r)
			continue
		}
		h.ServeHTTP(&discardWriter{h: http.Header{}}, r)
	}
}

// BenchmarkRemoveHopHeaders measures header sanitizing of a typical request.
func BenchmarkRemoveHopHeaders(b *testing.B) {
	src := http.Header{"Accept": {"*/*"}, "User-Agent": {"bench"}, "Accept-Encoding": {"gzip"}, "Cookie": {strings.Repeat("a", 40)}}
	b.ReportAllocs()
	for b.Loop() {
		h := src.Clone()
		wire.RemoveHopHeaders(h)
	}
}

// BenchmarkHandlerPrometheus is BenchmarkHandler with the Prometheus sink
// the agent uses, to show the cost of per-request metrics.
func BenchmarkHandlerPrometheus(b *testing.B) {
	sink, err := gmprom.NewPrometheusSinkFrom(gmprom.PrometheusOpts{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	cfg := metrics.DefaultConfig("impulse")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics = false, false
	m, _ := metrics.New(cfg, sink)
	benchHandler(b, m, false)
}

// BenchmarkHandlerHTTP1 is the whole handler against a real HTTP/1.1 backend
// on loopback (one request at a time), i.e. the proxy hop without QUIC.
func BenchmarkHandlerHTTP1(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 64)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "64")
		w.Write(body)
	}))
	b.Cleanup(be.Close) // after the gateway's (benchGateway)
	host, port, _ := net.SplitHostPort(be.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	uc := UpstreamConfig{Config: upstream.Config{Name: "web", ResponseHeaderTimeout: 30 * time.Second},
		Routes: []RouteConfig{{PathPrefix: "/"}},
		Static: []upstream.Spec{{ID: "a", Scheme: "http", Host: host, Port: p, Weight: 1}}}
	_, h := benchGateway(b, Config{Upstreams: []UpstreamConfig{uc}})
	u, _ := url.Parse("https://example.com/small")
	b.ReportAllocs()
	for b.Loop() {
		r := &http.Request{Method: "GET", URL: u, Host: "example.com", Proto: "HTTP/3.0", ProtoMajor: 3,
			Header: http.Header{"Accept": {"*/*"}}, RemoteAddr: "127.0.0.1:40000", Body: http.NoBody}
		h.ServeHTTP(&discardWriter{h: http.Header{}}, r.WithContext(b.Context()))
	}
}

// BenchmarkOutgoing measures the header conversion of one request: the
// HTTP/3 request's fields and headers into the backend request (hop-by-hop
// removal, X-Forwarded-*, URL), without sending it.
func BenchmarkOutgoing(b *testing.B) {
	u, err := upstream.New(upstream.Config{Name: "u"})
	if err != nil {
		b.Fatal(err)
	}
	defer u.Close()
	if err := u.SetStatic([]upstream.Spec{{ID: "b", Scheme: transport.SchemeHTTP, Host: "127.0.0.1", Port: 8080}}); err != nil {
		b.Fatal(err)
	}
	be := u.Current().Backends[0]
	src, _ := url.Parse("https://example.com/api/v1/items?limit=10")
	r := (&http.Request{Method: "GET", URL: src, Host: "example.com", Proto: "HTTP/3.0", ProtoMajor: 3,
		Header: http.Header{"Accept": {"*/*"}, "User-Agent": {"bench"}, "Accept-Encoding": {"gzip"},
			"Cookie": {strings.Repeat("a", 40)}, "Connection": {"keep-alive"}},
		RemoteAddr: "127.0.0.1:40000", ContentLength: 0, Body: http.NoBody}).WithContext(b.Context())
	b.ReportAllocs()
	for b.Loop() {
		_, _ = wire.Outgoing(r.Context(), r, be, wire.Body{}, false, nil)
	}
}

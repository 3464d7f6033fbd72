package gateway

import (
	"io"
	"net/http"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
)

// BenchmarkHandlerAccessLog is BenchmarkHandler with the access log on,
// its lines formatted and discarded by the writer goroutine.
func BenchmarkHandlerAccessLog(b *testing.B) {
	g, h := benchGateway(b, Config{Upstreams: []UpstreamConfig{memUpstream(1)}, AccessLog: &accesslog.Config{Writer: io.Discard}})
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(&discardWriter{h: http.Header{}}, benchRequest().WithContext(b.Context()))
	}
	dropped := g.obs.Metrics.AccessLogDropped()
	b.ReportMetric(float64(dropped)/float64(b.N), "dropped/op")
}

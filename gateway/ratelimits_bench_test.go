package gateway

import (
	"net/http"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/ratelimit"
)

// BenchmarkHandlerRateLimited is BenchmarkHandler with a client_ip rate
// limit that admits every request: the rate-limit step's cost on the whole
// path (compare with BenchmarkHandler; no allocation of its own).
func BenchmarkHandlerRateLimited(b *testing.B) {
	uc := memUpstream(1)
	uc.RateLimit = &ratelimit.Config{RequestsPerSecond: ratelimit.MaxRequestsPerSecond, Burst: 1 << 30}
	_, h := benchGateway(b, Config{Upstreams: []UpstreamConfig{uc}})
	b.ReportAllocs()
	for b.Loop() {
		r := benchRequest()
		r = r.WithContext(b.Context())
		h.ServeHTTP(&discardWriter{h: http.Header{}}, r)
	}
}

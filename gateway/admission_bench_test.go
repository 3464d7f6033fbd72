package gateway

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// BenchmarkAdmission is admit, pick and release of one request when the
// concurrency limits are off and when they are on but not reached: no
// allocation either way (plus TestAdmissionNoAlloc); pick-only is the
// part that predates admission, for the difference.
func BenchmarkAdmission(b *testing.B) {
	for _, bc := range []struct {
		name                         string
		global, maxReq, queue, perBE int
	}{{"off", 0, 0, 0, 0}, {"under", 1 << 20, 1 << 20, 100, 1 << 20}} {
		b.Run(bc.name, func(b *testing.B) {
			g, rec, r, up := admissionFixture(b, bc.global, bc.maxReq, bc.queue, bc.perBE)
			b.ReportAllocs()
			for b.Loop() {
				admitOnce(g, rec, r, up)
			}
		})
	}
	// What the handler did before admission existed: Pick, Acquire, Done.
	b.Run("pick-only", func(b *testing.B) {
		_, _, r, up := admissionFixture(b, 0, 0, 0, 0)
		b.ReportAllocs()
		for b.Loop() {
			be, _ := up.Pick(r)
			be.Acquire()
			be.Done(health.Neutral, "", 0)
		}
	})
}

func admitOnce(g *Gateway, rec *recorder, r *http.Request, up *upstream.Upstream) {
	held, ok := g.admit(rec, nil, up)
	if !ok {
		panic("refused")
	}
	be := g.pick(rec, nil, r, up)
	if be == nil {
		panic("no backend")
	}
	be.Done(health.Neutral, "", 0)
	held.release()
}

// TestAdmissionNoAlloc: admission below the limits does not allocate.
func TestAdmissionNoAlloc(t *testing.T) {
	for _, on := range []bool{false, true} {
		n := 0
		if on {
			n = 1000
		}
		g, rec, r, up := admissionFixture(t, n, n, n, n)
		if a := testing.AllocsPerRun(1000, func() { admitOnce(g, rec, r, up) }); a != 0 {
			t.Errorf("limits on %v: %v allocations per request", on, a)
		}
	}
}

func admissionFixture(tb testing.TB, global, maxReq, queue, perBE int) (*Gateway, *recorder, *http.Request, *upstream.Upstream) {
	uc := memUpstream(2)
	uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout, uc.MaxRequestsPerBackend = maxReq, queue, time.Second, perBE
	g, _ := benchGateway(tb, Config{Upstreams: []UpstreamConfig{uc}, MaxRequests: global})
	u, _ := url.Parse("https://example.com/")
	r := (&http.Request{Method: "GET", URL: u, Host: "example.com", Header: http.Header{}, ProtoMajor: 3}).WithContext(context.Background())
	rec := new(recorder)
	rec.begin(g, "", nil, r)
	return g, rec, r, g.table.Load().upstreams["web"]
}

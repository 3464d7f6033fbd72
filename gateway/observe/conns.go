package observe

import (
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-metrics/prometheus"
)

// Connection and upstream gauges: impulse_quic_connections{listener},
// impulse_tcp_connections{listener}, and the sampled
// impulse_upstream_in_flight{upstream} and
// impulse_upstream_backends_eligible{upstream}.
var (
	metricQUICConns = []string{"quic", "connections"}
	metricTCPConns  = []string{"tcp", "connections"}
	metricInFlight  = []string{"upstream", "in_flight"}
	metricEligible  = []string{"upstream", "backends", "eligible"}
)

var (
	connGauges = []prometheus.GaugeDefinition{
		{Name: metricQUICConns, Help: "Active QUIC connections per listener."},
		{Name: metricTCPConns, Help: "Open TCP connections (HTTP/1.1 and HTTP/2 over TLS) per listener."},
	}
	upstreamGauges = []prometheus.GaugeDefinition{
		{Name: metricInFlight, Help: "Requests in flight to the backends of an upstream, sampled every second."},
		{Name: metricEligible, Help: "Backends of an upstream that may receive traffic now, sampled every second."},
	}
)

// connKey is one connection gauge: the metric (QUIC or TCP) and listener.
type connKey struct {
	tcp      bool
	listener string
}

// ConnDelta adds d to a listener's connection gauge: TCP connections when
// tcp is set, else QUIC ones. A d of 0 creates the series.
func (gm *Metrics) ConnDelta(tcp bool, listener string, d int64) {
	key := connKey{tcp: tcp, listener: listener}
	v, _ := gm.conns.LoadOrStore(key, new(atomic.Int64))
	gm.setConns(key, v.(*atomic.Int64).Add(d))
}

// Conns is a listener's open TCP (tcp) or QUIC connections.
func (gm *Metrics) Conns(tcp bool, listener string) int64 {
	if v, ok := gm.conns.Load(connKey{tcp: tcp, listener: listener}); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

func (gm *Metrics) setConns(key connKey, n int64) {
	metric := metricQUICConns
	if key.tcp {
		metric = metricTCPConns
	}
	gm.m.SetGaugeWithLabels(metric, float32(n), labels("listener", key.listener))
}

// SampleConns re-sets the connection and tunnel gauges, so that a
// listener whose connections do not change keeps its series (see
// touchEvery).
func (gm *Metrics) SampleConns() {
	gm.conns.Range(func(k, v any) bool {
		gm.setConns(k.(connKey), v.(*atomic.Int64).Load())
		return true
	})
	gm.sampleTunnels()
}

// SampleUpstream sets an upstream's sampled gauges, its requests in flight
// and its eligible backends (when due: gaugeSamples).
func (gm *Metrics) SampleUpstream(now time.Time, name string, inFlight int64, eligible int) {
	if gm.samples.due(sampleKey{"upstream", name, ""}, now, inFlight, int64(eligible)) {
		l := labels("upstream", name)
		gm.m.SetGaugeWithLabels(metricInFlight, float32(inFlight), l)
		gm.m.SetGaugeWithLabels(metricEligible, float32(eligible), l)
	}
}

// EndSamples ends a sampling round: the series it did not sample (an
// upstream gone with a reload or from the catalog) are forgotten.
func (gm *Metrics) EndSamples() { gm.samples.endRound() }

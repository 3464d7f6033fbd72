package gateway

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-metrics"
)

// Tunnel metric keys (see metrics.go for the others).
var (
	metricTunnels     = []string{"tunnels"}
	metricTunnelBytes = []string{"tunnel", "bytes"}
)

// tunnelKey labels one open-tunnel gauge.
type tunnelKey struct{ listener, upstream, upgrade string }

// tunnelBytesKey labels one byte counter; toBackend is the direction.
type tunnelBytesKey struct {
	listener, upstream string
	toBackend          bool
}

// tunnelCounts holds the tunnel gauges and byte counters; bytes are added
// with one atomic add per write and handed to go-metrics on flush.
type tunnelCounts struct {
	open  sync.Map // tunnelKey → *atomic.Int64
	bytes sync.Map // tunnelBytesKey → *[2]atomic.Uint64 (total, flushed)
}

// tunnelDelta adds d to the open-tunnel gauge of key.
func (gm *gatewayMetrics) tunnelDelta(key tunnelKey, d int64) {
	v, _ := gm.tunnels.open.LoadOrStore(key, new(atomic.Int64))
	gm.setTunnels(key, v.(*atomic.Int64).Add(d))
}

func (gm *gatewayMetrics) setTunnels(key tunnelKey, n int64) {
	gm.m.SetGaugeWithLabels(metricTunnels, float32(n), []metrics.Label{
		{Name: "listener", Value: key.listener}, {Name: "upstream", Value: key.upstream}, {Name: "upgrade", Value: key.upgrade}})
}

// tunnelBytes returns the byte counter of key, for the tunnel to add to.
func (gm *gatewayMetrics) tunnelBytes(key tunnelBytesKey) *[2]atomic.Uint64 {
	v, _ := gm.tunnels.bytes.LoadOrStore(key, new([2]atomic.Uint64))
	return v.(*[2]atomic.Uint64)
}

// sampleTunnels re-sets the open-tunnel gauges, as sampleConns does.
func (gm *gatewayMetrics) sampleTunnels() {
	gm.tunnels.open.Range(func(k, v any) bool {
		gm.setTunnels(k.(tunnelKey), v.(*atomic.Int64).Load())
		return true
	})
}

// flushTunnelBytes hands the bytes counted since the last call to go-metrics.
func (gm *gatewayMetrics) flushTunnelBytes() {
	gm.tunnelMu.Lock()
	defer gm.tunnelMu.Unlock()
	gm.tunnels.bytes.Range(func(k, v any) bool {
		key, c := k.(tunnelBytesKey), v.(*[2]atomic.Uint64)
		total := c[0].Load()
		d := total - c[1].Load()
		if d == 0 {
			return true
		}
		c[1].Store(total)
		dir := "to_client"
		if key.toBackend {
			dir = "to_backend"
		}
		gm.m.IncrCounterWithLabels(metricTunnelBytes, float32(d), []metrics.Label{
			{Name: "listener", Value: key.listener}, {Name: "upstream", Value: key.upstream}, {Name: "direction", Value: dir}})
		return true
	})
}

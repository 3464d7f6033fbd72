package observe

import (
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-metrics/prometheus"
)

// Tunnel metrics: impulse_tunnels{listener,upstream,upgrade} (open now)
// and impulse_tunnel_bytes{listener,upstream,direction}.
var (
	metricTunnels     = []string{"tunnels"}
	metricTunnelBytes = []string{"tunnel", "bytes"}
)

var (
	tunnelCounters = []prometheus.CounterDefinition{
		{Name: metricTunnelBytes, Help: "Bytes relayed through tunnels (WebSocket and other upgrades), by listener, upstream and direction (to_backend, to_client)."},
	}
	tunnelGauges = []prometheus.GaugeDefinition{
		{Name: metricTunnels, Help: "Open tunnels (WebSocket and other upgrades), by listener, upstream and upgrade protocol."},
	}
)

// TunnelKey labels one open-tunnel gauge.
type TunnelKey struct{ Listener, Upstream, Upgrade string }

// tunnelBytesKey labels one byte counter; toBackend is the direction.
type tunnelBytesKey struct {
	listener, upstream string
	toBackend          bool
}

// TunnelBytes is one byte counter of a direction: the total, added to
// with one atomic add per write, and what was flushed of it.
type TunnelBytes [2]atomic.Uint64

// Add counts n bytes relayed.
func (b *TunnelBytes) Add(n int) {
	if b != nil {
		b[0].Add(uint64(n))
	}
}

// tunnelCounts holds the tunnel gauges and byte counters.
type tunnelCounts struct {
	open  sync.Map // TunnelKey → *atomic.Int64
	bytes sync.Map // tunnelBytesKey → *TunnelBytes
}

// TunnelDelta adds d to the open-tunnel gauge of key.
func (gm *Metrics) TunnelDelta(key TunnelKey, d int64) {
	v, _ := gm.tunnels.open.LoadOrStore(key, new(atomic.Int64))
	gm.setTunnels(key, v.(*atomic.Int64).Add(d))
}

func (gm *Metrics) setTunnels(key TunnelKey, n int64) {
	gm.m.SetGaugeWithLabels(metricTunnels, float32(n), labels("listener", key.Listener, "upstream", key.Upstream, "upgrade", key.Upgrade))
}

// TunnelByteCounter returns the byte counter of a listener's tunnels to
// upstream in one direction, for the tunnel to add to.
func (gm *Metrics) TunnelByteCounter(listener, upstream string, toBackend bool) *TunnelBytes {
	v, _ := gm.tunnels.bytes.LoadOrStore(tunnelBytesKey{listener, upstream, toBackend}, new(TunnelBytes))
	return v.(*TunnelBytes)
}

// OpenTunnels is the open tunnels to upstream, every listener and upgrade.
func (gm *Metrics) OpenTunnels(upstream string) int64 {
	var n int64
	gm.tunnels.open.Range(func(k, v any) bool {
		if k.(TunnelKey).Upstream == upstream {
			n += v.(*atomic.Int64).Load()
		}
		return true
	})
	return n
}

// TunnelBytesOf is the bytes relayed through upstream's tunnels each way.
func (gm *Metrics) TunnelBytesOf(upstream string) (toBackend, toClient uint64) {
	gm.tunnels.bytes.Range(func(k, v any) bool {
		key, c := k.(tunnelBytesKey), v.(*TunnelBytes)
		if key.upstream == upstream {
			if key.toBackend {
				toBackend += c[0].Load()
			} else {
				toClient += c[0].Load()
			}
		}
		return true
	})
	return toBackend, toClient
}

// sampleTunnels re-sets the open-tunnel gauges.
func (gm *Metrics) sampleTunnels() {
	gm.tunnels.open.Range(func(k, v any) bool {
		gm.setTunnels(k.(TunnelKey), v.(*atomic.Int64).Load())
		return true
	})
}

// flushTunnelBytes hands the bytes counted since the last call to go-metrics.
func (gm *Metrics) flushTunnelBytes() {
	gm.tunnelMu.Lock()
	defer gm.tunnelMu.Unlock()
	gm.tunnels.bytes.Range(func(k, v any) bool {
		key, c := k.(tunnelBytesKey), v.(*TunnelBytes)
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
		gm.m.IncrCounterWithLabels(metricTunnelBytes, float32(d), labels("listener", key.listener, "upstream", key.upstream, "direction", dir))
		return true
	})
}

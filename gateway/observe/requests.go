package observe

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-metrics/prometheus"
)

// The request family: impulse_requests{listener,protocol,upstream,code,reason}
// and the duration histogram impulse_request_duration_bucket{le}, _sum
// (ms) and _count, labelled without reason.
var (
	metricRequests       = []string{"requests"}
	metricDurationBucket = []string{"request", "duration", "bucket"}
	metricDurationSum    = []string{"request", "duration", "sum"}
	metricDurationCount  = []string{"request", "duration", "count"}
)

// The duration histogram has no definition: go-metrics would add an
// unlabelled zero series, a bucket without le that histogram_quantile()
// cannot place.
var requestCounters = []prometheus.CounterDefinition{
	{Name: metricRequests, Help: "Requests handled, by listener, upstream, status class (code) and gateway reason."},
}

// RequestLabels is one label set of impulse_requests.
type RequestLabels struct{ Listener, Protocol, Upstream, Code, Reason string }

// durationBounds are the histogram's upper bounds in µs (the le labels are
// in ms: 1 ms to 10 s, Prometheus' default buckets with 1 and 2.5 ms added
// for a gateway next to its backends).
var durationBounds = [...]int64{1e3, 2.5e3, 5e3, 10e3, 25e3, 50e3, 100e3, 250e3, 500e3, 1e6, 2.5e6, 5e6, 10e6}

var durationLabels = func() (l [len(durationBounds) + 1]string) {
	for i, b := range durationBounds {
		l[i] = strconv.FormatFloat(float64(b)/1e3, 'f', -1, 64)
	}
	l[len(durationBounds)] = "+Inf"
	return l
}()

// requestCount is one label set's request histogram: a count per bucket
// (not cumulative; the last is above every bound) and the total µs, with
// the values already flushed.
type requestCount struct {
	buckets, flushedBuckets [len(durationBounds) + 1]atomic.Uint64
	sumUs, flushedSumUs     atomic.Uint64
	touched                 time.Time // last handed to go-metrics; flushMu guards it
}

func (c *requestCount) total() uint64 {
	var n uint64
	for i := range c.buckets {
		n += c.buckets[i].Load()
	}
	return n
}

// durationKey labels the duration histogram: reason is left out.
type durationKey struct{ listener, protocol, upstream, code string }

// durationDelta accumulates one flush's histogram deltas for a durationKey.
type durationDelta struct {
	buckets [len(durationBounds) + 1]uint64
	sumUs   uint64
}

// request counts one request and its duration: two atomic adds.
func (gm *Metrics) request(listener, protocol, upstream string, status int, reason string, d time.Duration) {
	key := RequestLabels{listener, protocol, upstream, StatusClass(status), reason}
	c, ok := gm.requests.Load(key)
	if !ok {
		c, _ = gm.requests.LoadOrStore(key, new(requestCount))
	}
	rc := c.(*requestCount)
	us := d.Microseconds()
	i := 0
	for i < len(durationBounds) && us > durationBounds[i] {
		i++
	}
	rc.buckets[i].Add(1)
	rc.sumUs.Add(uint64(max(us, 0)))
}

// Requests is the number of requests counted under the label sets match
// selects (for tests and reports).
func (gm *Metrics) Requests(match func(RequestLabels) bool) uint64 {
	var n uint64
	gm.requests.Range(func(k, v any) bool {
		if match(k.(RequestLabels)) {
			n += v.(*requestCount).total()
		}
		return true
	})
	return n
}

// flushRequests hands impulse_requests per label set and, per durationKey,
// the cumulative impulse_request_duration_bucket{le} counters with _sum
// (ms) and _count (the Prometheus histogram convention) to go-metrics.
// flushMu is held.
func (gm *Metrics) flushRequests(now time.Time, live func(upstream string) bool) {
	deltas := map[durationKey]*durationDelta{}
	gm.requests.Range(func(k, v any) bool {
		key, c := k.(RequestLabels), v.(*requestCount)
		dk := durationKey{key.Listener, key.Protocol, key.Upstream, key.Code}
		var n uint64
		dd := deltas[dk]
		for i := range c.buckets {
			b := c.buckets[i].Load()
			d := b - c.flushedBuckets[i].Load()
			if d == 0 {
				continue
			}
			c.flushedBuckets[i].Store(b)
			n += d
			if dd == nil {
				dd = &durationDelta{}
				deltas[dk] = dd
			}
			dd.buckets[i] += d
		}
		if n == 0 {
			switch {
			case key.Upstream != "" && !live(key.Upstream):
				if now.Sub(c.touched) > forgetAfter {
					gm.requests.Delete(k)
				}
				return true
			case now.Sub(c.touched) < touchEvery:
				return true
			}
			if dd == nil {
				deltas[dk] = &durationDelta{} // touch the histogram too
			}
		} else {
			sum := c.sumUs.Load()
			dd.sumUs += sum - c.flushedSumUs.Load()
			c.flushedSumUs.Store(sum)
		}
		c.touched = now
		gm.m.IncrCounterWithLabels(metricRequests, float32(n), labels("listener", key.Listener, "protocol", key.Protocol,
			"upstream", key.Upstream, "code", key.Code, "reason", key.Reason))
		return true
	})
	for k, dd := range deltas {
		l := labels("listener", k.listener, "protocol", k.protocol, "upstream", k.upstream, "code", k.code)
		// Every bucket is touched, even by 0, so each histogram has its full
		// set of le series and they expire together (prometheus_retention).
		var cum uint64
		for i, d := range dd.buckets {
			cum += d
			gm.m.IncrCounterWithLabels(metricDurationBucket, float32(cum), append(l[:len(l):len(l)], labelOf("le", durationLabels[i])))
		}
		gm.m.IncrCounterWithLabels(metricDurationSum, float32(dd.sumUs)/1e3, l)
		gm.m.IncrCounterWithLabels(metricDurationCount, float32(cum), l)
	}
}

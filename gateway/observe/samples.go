package observe

import (
	"sync"
	"time"
)

// gaugeSamples remembers what the sampled gauges (the upstream and limit
// gauges, set every second by the gateway's sampler) were last set to, so
// a gauge is set only when its value changed or touchEvery has passed
// (go-metrics' retention drops a series not set for its expiration). At
// 5,000 upstreams, setting every gauge every second cost an idle gateway
// more CPU than everything else it does together. Owned by the sampler,
// one goroutine; the mutex keeps it safe for tests.
type gaugeSamples struct {
	mu    sync.Mutex
	last  map[sampleKey]*gaugeSample
	round uint64
}

// sampleKey names one sampled series group: its kind and label values.
type sampleKey struct{ kind, a, b string }

type gaugeSample struct {
	v     [2]int64
	at    time.Time // when the gauges were last set
	round uint64    // the sampling round that saw them last
}

// due records the values x and y of key at now and reports whether its
// gauges must be set: new, changed, or last set touchEvery ago.
func (g *gaugeSamples) due(key sampleKey, now time.Time, x, y int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil {
		g.last = map[sampleKey]*gaugeSample{}
	}
	s := g.last[key]
	v := [2]int64{x, y}
	if s != nil && s.v == v && now.Sub(s.at) < touchEvery {
		s.round = g.round
		return false
	}
	if s == nil {
		s = &gaugeSample{}
		g.last[key] = s
	}
	s.v, s.at, s.round = v, now, g.round
	return true
}

// endRound forgets the series the round did not sample.
func (g *gaugeSamples) endRound() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, s := range g.last {
		if s.round != g.round {
			delete(g.last, k)
		}
	}
	g.round++
}

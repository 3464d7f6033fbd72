package balance

import (
	"net/http"
	"sync/atomic"
)

// peakEWMA is the peak-EWMA policy of Finagle and Linkerd: the power of two
// choices (Mitzenmacher) comparing an estimate of the latency the next
// request would see,
//
//	cost = LatencyEWMA × (InFlight + Weight) / Weight
//	     = LatencyEWMA × (1 + InFlight/Weight)
//
// i.e. the backend's own latency plus the queue ahead of the request, where a
// backend of weight w works through w requests at once. For weight 1 this is
// Finagle's LatencyEWMA × (InFlight+1). Folding the weight into the queue
// term (rather than dividing the whole cost by it) matters because the two
// choices are already drawn weight-proportionally: with equal latencies and
// nothing in flight the costs tie and a coin decides, which makes each pick a
// weighted random pick (case L01); dividing by the weight again would send
// idle traffic almost only to the heaviest backend.
//
// A candidate without a sample (LatencyEWMA 0) costs 0 while idle, so it is
// preferred; with requests in flight it costs a large penalty until its first
// sample arrives, as in Finagle, so a new backend of unknown speed gets one
// probe rather than a flood. In addition, candidates that had no sample when
// the picker was built (new members) are probed first, one at a time,
// without waiting for the two choices to find them.
type peakEWMA struct{}

// unsampledBusyCost is the latency (ns) assumed for a candidate that has
// requests in flight but no sample yet: far above any real latency.
const unsampledBusyCost = 1e18

// Picker implements Policy.
func (peakEWMA) Picker(c []Candidate) Picker {
	if p, ok := trivialPicker(c); ok {
		return p
	}
	p := &ewmaPicker{}
	p.s.init(c)
	for i, x := range c {
		if x.LatencyEWMA() == 0 {
			p.probe = append(p.probe, i)
		}
	}
	p.probing.Store(len(p.probe) > 0)
	return p
}

type ewmaPicker struct {
	s sampler
	// probe lists the candidates unsampled when the picker was built;
	// probing is cleared once none of the eligible ones is still unsampled.
	probe   []int
	probing atomic.Bool
}

// Pick implements Picker.
func (p *ewmaPicker) Pick(_ *http.Request, skip Skip) int {
	if p.probing.Load() {
		if i, pending := p.nextProbe(&skip); i >= 0 {
			return i
		} else if !pending && skip.n == 0 {
			p.probing.Store(false)
		}
	}
	i := p.s.sample(&skip)
	if i < 0 {
		return -1
	}
	j := p.s.sample(&skip)
	if j < 0 || j == i {
		return i
	}
	ci, cj := ewmaCost(p.s.c[i]), ewmaCost(p.s.c[j])
	switch {
	case ci < cj:
		return i
	case cj < ci:
		return j
	case coin():
		return i
	default:
		return j
	}
}

// nextProbe returns an eligible, idle, still unsampled candidate of the
// probe list that skip does not hold, or -1 and whether any eligible one is
// still waiting for its first sample.
func (p *ewmaPicker) nextProbe(skip *Skip) (int, bool) {
	pending := false
	for _, i := range p.probe {
		c := p.s.c[i]
		if c.LatencyEWMA() != 0 || !usable(p.s.c, i, skip) {
			continue
		}
		if c.InFlight() == 0 {
			return i, true
		}
		pending = true
	}
	return -1, pending
}

// ewmaCost is the peak-EWMA cost of c; see peakEWMA.
func ewmaCost(c Candidate) float64 {
	lat, n := c.LatencyEWMA(), c.InFlight()
	if lat <= 0 {
		if n <= 0 {
			return 0
		}
		lat = unsampledBusyCost
	}
	return lat * (1 + float64(n)/float64(weightOf(c)))
}

package agent

// The status page's request and error rates: the gateway's cumulative
// response counts per upstream (gateway.Traffic), sampled into a fixed ring
// of buckets. No Prometheus needed.

import (
	"sync"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

const (
	// trafficBucket is the length of one bucket; trafficBuckets of them
	// (10 minutes) are kept.
	trafficBucket  = 5 * time.Second
	trafficBuckets = 120
)

// trafficRing holds the last trafficBuckets buckets of response counts per
// upstream. The agent's sampler goroutine writes it (tick), the control API
// reads it (doc).
type trafficRing struct {
	read  func() map[string]upstream.ResponseCounts
	every time.Duration

	mu      sync.Mutex
	buckets []trafficSample // oldest first, at most cap
	prev    map[string]upstream.ResponseCounts
	prevAt  time.Time
}

// trafficSample is one bucket: the responses counted in (End-Seconds, End].
type trafficSample struct {
	End     time.Time                          `json:"end"`
	Seconds float64                            `json:"seconds"`
	Counts  map[string]upstream.ResponseCounts `json:"upstreams"`
	// Partial marks the bucket still being filled (the last one served).
	Partial bool `json:"partial,omitempty"`
}

// trafficDoc is the "traffic" part of /v1/status.
type trafficDoc struct {
	// BucketSeconds is a bucket's length; BucketCount how many are kept.
	BucketSeconds float64         `json:"bucket_seconds"`
	BucketCount   int             `json:"bucket_count"`
	Buckets       []trafficSample `json:"buckets"`
}

// newTrafficRing keeps n buckets of length every of what read returns,
// the first one starting at start.
func newTrafficRing(read func() map[string]upstream.ResponseCounts, every time.Duration, n int, start time.Time) *trafficRing {
	return &trafficRing{read: read, every: every, buckets: make([]trafficSample, 0, n), prev: read(), prevAt: start}
}

// tick closes a bucket when one is due at now. The sampler calls it every
// second: a bucket closes within a second of its length.
func (t *trafficRing) tick(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Sub(t.prevAt) < t.every-t.every/10 {
		return
	}
	cur := t.read()
	if len(t.buckets) == cap(t.buckets) {
		copy(t.buckets, t.buckets[1:])
		t.buckets = t.buckets[:len(t.buckets)-1]
	}
	t.buckets = append(t.buckets, trafficSample{End: now, Seconds: now.Sub(t.prevAt).Seconds(), Counts: delta(cur, t.prev)})
	t.prev, t.prevAt = cur, now
}

// delta is cur - prev per upstream (a new or reset counter counts from 0),
// without the upstreams that answered nothing: a bucket of 5,000 mostly idle
// upstreams held an entry each, 120 buckets 70 MB of heap (and as much
// JSON in /v1/status); the page reads a missing upstream as 0.
func delta(cur, prev map[string]upstream.ResponseCounts) map[string]upstream.ResponseCounts {
	out := map[string]upstream.ResponseCounts{}
	for name, c := range cur {
		if d := c.Sub(prev[name]); d != (upstream.ResponseCounts{}) {
			out[name] = d
		}
	}
	return out
}

// doc returns the closed buckets, oldest first, and the one being filled.
func (t *trafficRing) doc(now time.Time) trafficDoc {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := trafficDoc{BucketSeconds: t.every.Seconds(), BucketCount: cap(t.buckets), Buckets: make([]trafficSample, 0, len(t.buckets)+1)}
	d.Buckets = append(d.Buckets, t.buckets...)
	if now.After(t.prevAt) {
		d.Buckets = append(d.Buckets, trafficSample{End: now, Seconds: now.Sub(t.prevAt).Seconds(), Counts: delta(t.read(), t.prev), Partial: true})
	}
	return d
}

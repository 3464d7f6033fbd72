package upstream

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
)

// Backend is the live state of one backend. It is shared by every request
// and by every set that holds it; fields are read-only after creation except
// the atomics.
type Backend struct {
	Spec
	Source    string
	Transport transport.RoundTripper
	// Health is the backend's active and passive health (never nil).
	Health *health.State

	inFlight  atomic.Int64
	maxFlight *atomic.Int64 // the upstream's max_requests_per_backend (≤ 0: none)
	// unanswered counts the requests sent since the backend's last answer
	// (response headers); answersAtLast is its upstream's answer count
	// (answers) at that answer. At unansweredLimit (0: off), while its
	// siblings answered since, it is behind (perbackend.go).
	unanswered      atomic.Int64
	answersAtLast   atomic.Int64
	answers         *answerLog // the upstream's
	unansweredLimit int64
	requests        *atomic.Uint64 // shared with the same backend in the upstream a reload rebuilt
	removed         atomic.Bool
	ewma            atomic.Uint64 // float64 bits, ns
	res             *resolver
	hostPort        string       // Spec.Addr(), computed once
	warmSince       atomic.Int64 // unix ns when slow start began; 0 = full weight
	slowStart       time.Duration
	stopChecks      context.CancelFunc
	responses       *ResponseCounter // responses.go; shared as requests is
}

// Weight implements balance.Candidate: the configured weight, ramped up
// linearly from 1 during slow start after the backend joined or recovered.
func (b *Backend) Weight() int {
	w := max(b.Spec.Weight, 1)
	if since := b.warmSince.Load(); since != 0 {
		el := time.Now().UnixNano() - since
		if el >= int64(b.slowStart) || el < 0 {
			b.warmSince.CompareAndSwap(since, 0)
			return w
		}
		// In floating point: weight × ns overflows int64 for a Consul weight
		// (up to 65535 × 100) over an hour-long ramp.
		return max(1, int(float64(w)*float64(el)/float64(b.slowStart)))
	}
	return w
}

// warmUp starts slow start (no-op when it is off).
func (b *Backend) warmUp() {
	if b.slowStart > 0 {
		b.warmSince.Store(time.Now().UnixNano())
	}
}

// sameTarget reports whether s reaches the same server as b (scheme, host
// and port): a change of weight alone keeps the backend's health.
func (b *Backend) sameTarget(s Spec) bool {
	return b.Scheme == s.Scheme && b.Host == s.Host && b.Port == s.Port
}

// HostPort is the backend's host:port (IPv6 bracketed), for request URLs.
func (b *Backend) HostPort() string { return b.hostPort }

// Key implements balance.Candidate: the stable identity used for hashing.
func (b *Backend) Key() string { return b.ID }

// Eligible implements balance.Candidate: the active check admits the backend
// and it is not ejected. Membership is the set itself: removed backends are
// never in a published set.
func (b *Backend) Eligible() bool { return b.Health.Eligible() && b.res.usable() }

// Resolution returns the backend's address state.
func (b *Backend) Resolution() Resolution { return b.res.snapshot() }

// LatencyEWMA implements balance.Candidate: the peak-EWMA latency in ns, 0
// before the first sample.
func (b *Backend) LatencyEWMA() float64 { return math.Float64frombits(b.ewma.Load()) }

// observeLatency folds one request's duration into the peak EWMA: a slower
// sample is taken at once, faster ones decay it with weight 1/8.
func (b *Backend) observeLatency(d time.Duration) {
	x := float64(d)
	for {
		old := b.ewma.Load()
		cur := math.Float64frombits(old)
		next := x
		if cur != 0 && x < cur {
			next = cur + (x-cur)/8
		}
		if b.ewma.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

// InFlight implements balance.Candidate: requests currently in flight.
func (b *Backend) InFlight() int64 { return b.inFlight.Load() }

// Requests is the number of requests sent to this backend so far.
func (b *Backend) Requests() uint64 { return b.requests.Load() }

// Removed reports whether the backend has left its upstream (it may still
// finish in-flight requests).
func (b *Backend) Removed() bool { return b.removed.Load() }

// Acquire counts a request starting, whatever the backend's limit; every
// Acquire is paired with Done.
func (b *Backend) Acquire() {
	b.inFlight.Add(1)
	b.requests.Add(1)
	if b.unansweredLimit > 0 {
		b.unanswered.Add(1)
	}
}

// Done counts a request ending with its outcome (recorded exactly once per
// request, for passive tracking), the failure reason and the time to the
// end of the response. When the backend has been removed and this was its
// last request, its idle connections are closed (drain).
func (b *Backend) Done(o health.Outcome, reason string, d time.Duration) {
	b.Health.Observe(o, reason)
	if o != health.Neutral {
		b.observeLatency(d)
	}
	if o == health.Failure {
		b.failed()
	}
	if b.inFlight.Add(-1) == 0 {
		b.idle()
		if b.removed.Load() {
			b.Transport.CloseIdleConnections()
		}
	}
}

// Release ends a request that was counted (Acquire, TryAcquire) but never
// sent: no outcome for passive health, as Done with health.Neutral.
func (b *Backend) Release() { b.Done(health.Neutral, "", 0) }

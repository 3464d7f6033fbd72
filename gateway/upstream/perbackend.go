package upstream

// max_requests_per_backend: a backend takes at most that many requests at
// once; the balance policies skip a full one (pickable) and the request
// that finds every healthy backend full is overloaded (Set.Saturated).

// SetMaxRequestsPerBackend sets max_requests_per_backend: how many
// requests each backend may have in flight (≤ 0: no limit). Pick skips a
// full backend; TryAcquire refuses it. It applies at once, to the current
// backends and to those that join later.
func (u *Upstream) SetMaxRequestsPerBackend(n int) { u.maxPerBackend.Store(int64(max(n, 0))) }

// MaxRequestsPerBackend is the limit SetMaxRequestsPerBackend set (0: none).
func (u *Upstream) MaxRequestsPerBackend() int { return int(u.maxPerBackend.Load()) }

// TryAcquire is Acquire unless the backend is full: its in-flight count
// has reached the upstream's max_requests_per_backend
// (SetMaxRequestsPerBackend). It reports whether the request was counted
// (then paired with Done). Lock-free; no allocation.
func (b *Backend) TryAcquire() bool {
	m := b.maxFlight.Load()
	for {
		n := b.inFlight.Load()
		if m > 0 && n >= m {
			return false
		}
		if b.inFlight.CompareAndSwap(n, n+1) {
			b.requests.Add(1)
			if b.unansweredLimit > 0 {
				b.unanswered.Add(1)
			}
			return true
		}
	}
}

// Full reports whether the backend has as many requests in flight as the
// upstream's max_requests_per_backend allows (false without one).
func (b *Backend) Full() bool {
	m := b.maxFlight.Load()
	return m > 0 && b.inFlight.Load() >= m
}

// pickable is what the balance policies see of a backend: a full backend
// (Backend.Full) is not eligible, so every policy skips it as it skips an
// unhealthy one, and its picker needs no rebuild when the limit changes.
// Backend.Eligible itself (reports, the eligible gauge) stays about health.
type pickable struct{ *Backend }

// Eligible implements balance.Candidate.
func (p pickable) Eligible() bool { return !p.Full() && !p.Stalled() && p.Backend.Eligible() }

// Saturated reports whether the set has backends that may take traffic
// (Backend.Eligible) and every one of them is Full: a request finds no
// backend because of max_requests_per_backend, not health.
func (s *Set) Saturated() bool {
	healthy := false
	for _, b := range s.Backends {
		if b.Eligible() {
			if !b.Full() {
				return false
			}
			healthy = true
		}
	}
	return healthy
}

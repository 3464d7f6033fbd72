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

// Claim is TryAcquire for a request's first try. overshoot reports a
// claim beyond the stall limit (Stalled): concurrent picks all saw room
// before any counted, and this one made the stalled backend hold more
// than outlier detection's consecutive_failures unanswered requests. The
// caller gives it back (Unclaim) when another backend can take the
// request, and keeps it otherwise.
func (b *Backend) Claim() (ok, overshoot bool) {
	if !b.TryAcquire() {
		return false, false
	}
	if b.unansweredLimit == 0 || b.unanswered.Load() <= b.unansweredLimit {
		return true, false
	}
	return true, b.answers.Load() > b.answersAtLast.Load()
}

// Unclaim gives back a Claim that was never sent.
func (b *Backend) Unclaim() {
	if b.unansweredLimit > 0 {
		b.unanswered.Add(-1)
	}
	b.requests.Add(^uint64(0))
	b.Release()
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

// A backend that stops answering (a black hole: it accepts connections and
// reads requests, and never answers) fails no request until each one's
// response_header timeout, long after the balancer has sent it many more.
// With outlier detection on, a backend holding consecutive_failures
// requests sent since its last answer, while the other backends of its
// upstream answered since, is behind: the pick skips it (and falls back to
// it only when nothing else can take the request) until it answers or
// holds none, and a claim that would make it hold more goes to another
// backend (Claim). Its stuck requests fail at their response_header
// timeout as failures in a row, and eject it. No clock is read: the
// evidence is the siblings' answers. A busy backend that keeps answering
// is behind only until its next answer, which steers new requests to the
// backends that keep up.

// Answered notes that the backend answered a request (response headers
// of any status, a 101 included).
func (b *Backend) Answered() {
	if b.unansweredLimit == 0 {
		return
	}
	b.answersAtLast.Store(b.answers.Add(1))
	if b.unanswered.Load() != 0 {
		b.unanswered.Store(0)
	}
}

// Stalled reports whether the backend is behind: it holds at least one
// request and has been sent outlier detection's consecutive_failures
// requests since its last answer, while another backend of its upstream
// answered since. The pick skips it while another can take the request.
func (b *Backend) Stalled() bool {
	return b.unansweredLimit > 0 && b.unanswered.Load() >= b.unansweredLimit && b.inFlight.Load() > 0 &&
		b.answers.Load() > b.answersAtLast.Load()
}

// leastUnanswered is the fallback of a pick that found no candidate while
// some are only stalled: the stalled one with the fewest requests sent
// since its last answer (-1: none). When every backend is stalled the
// whole upstream is slow, and requests keep going to it.
func (s *Set) leastUnanswered() int {
	best, bestN := -1, int64(0)
	for i, b := range s.Backends {
		if !b.Stalled() || b.Full() || !b.Eligible() {
			continue
		}
		if n := b.unanswered.Load(); best < 0 || n < bestN {
			best, bestN = i, n
		}
	}
	return best
}

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

package upstream

import "sync/atomic"

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

// answerLog counts the answers of an upstream's backends (the evidence
// that a silent one is behind); first is closed at the first outcome of a
// request to any of them, an answer or a failure: from then on the
// upstream is not cold (Claim).
type answerLog struct {
	n       atomic.Int64
	settled atomic.Bool
	first   chan struct{}
}

// add counts an answer and returns the count.
func (l *answerLog) add() int64 {
	l.settle()
	return l.n.Add(1)
}

// settle notes that a request to the upstream had an outcome.
func (l *answerLog) settle() {
	if !l.settled.Load() && l.settled.CompareAndSwap(false, true) {
		close(l.first)
	}
}

// Over is what Claim found beyond the per-backend limit.
type Over uint8

const (
	// Within: the claim is within the stall limit, or the backend
	// answered last (busy, not behind).
	Within Over = iota
	// Behind: the backend holds more than the limit of requests sent since
	// its last answer while its siblings answered since: another backend
	// should take the request.
	Behind
	// Cold: the backend holds more than the limit and no request to the
	// upstream has had an outcome yet (an answer, or a failure), so none
	// can be told to be behind: the request may wait for the first one
	// (Upstream.FirstAnswer).
	Cold
)

// Claim is TryAcquire for a request's first try. over reports a claim
// beyond the stall limit (outlier detection's consecutive_failures
// requests sent since the backend's last answer): concurrent picks all saw
// room before any counted, and this one made the backend hold more. The
// caller gives it back (Unclaim) when another backend can take the request
// (Behind), or after waiting for the upstream's first answer (Cold), and
// keeps it otherwise.
func (b *Backend) Claim() (ok bool, over Over) {
	if !b.TryAcquire() {
		return false, Within
	}
	if b.unansweredLimit == 0 || b.unanswered.Load() <= b.unansweredLimit {
		return true, Within
	}
	switch {
	case b.answers.n.Load() > b.answersAtLast.Load():
		return true, Behind
	case !b.answers.settled.Load():
		return true, Cold
	}
	return true, Within
}

// AtLimit reports whether the backend holds the stall limit of requests
// sent since its last answer (false without outlier detection): a Cold
// claim elsewhere is no better on it.
func (b *Backend) AtLimit() bool {
	return b.unansweredLimit > 0 && b.unanswered.Load() >= b.unansweredLimit
}

// Unclaim gives back a Claim that was never sent.
func (b *Backend) Unclaim() {
	if b.unansweredLimit > 0 {
		b.unanswered.Add(-1)
	}
	b.requests.Add(^uint64(0))
	b.Release()
}

// Answered notes that the backend answered a request (response headers
// of any status, a 101 included).
func (b *Backend) Answered() {
	if b.unansweredLimit == 0 {
		return
	}
	b.answersAtLast.Store(b.answers.add())
	if b.unanswered.Load() != 0 {
		b.unanswered.Store(0)
	}
}

// failed notes a request that ended in failure: the upstream is not cold
// any more (a backend that refuses at once is not silent). The failed
// request stays in the unanswered count until the backend answers or
// holds none (idle): a black hole whose stuck requests time out one by
// one must stay behind until the last of them has failed and ejected it.
func (b *Backend) failed() {
	if b.unansweredLimit > 0 {
		b.answers.settle()
	}
}

// idle notes that the backend holds no request any more: what it was sent
// unanswered has ended (failed, or given back), so a backend that
// refused or timed out starts again from nothing when it is back.
func (b *Backend) idle() {
	if b.unansweredLimit > 0 && b.unanswered.Load() != 0 {
		b.unanswered.Store(0)
	}
}

// Stalled reports whether the backend is behind: it holds at least one
// request and has been sent outlier detection's consecutive_failures
// requests since its last answer, while another backend of its upstream
// answered since. The pick skips it while another can take the request.
func (b *Backend) Stalled() bool {
	return b.unansweredLimit > 0 && b.unanswered.Load() >= b.unansweredLimit && b.inFlight.Load() > 0 &&
		b.answers.n.Load() > b.answersAtLast.Load()
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

package discovery

import (
	"context"
	"time"

	"golang.org/x/time/rate"
)

// fetchFunc performs ONE blocking query at index, waiting at most wait, and
// returns its result and the reply's X-Consul-Index. It knows nothing about
// retries or indexes.
type fetchFunc[T any] func(ctx context.Context, index uint64, wait time.Duration) (T, uint64, error)

// blockingLoop drives a fetchFunc until its context is done. It owns the
// blocking index, the rate limit, retries and stopping; what to do with a
// result is up to the hooks. It is generic so the rules live in one place and
// are tested without Consul.
type blockingLoop[T any] struct {
	fetch   fetchFunc[T]
	limiter *rate.Limiter
	backoff backoff

	// wait returns the blocking wait of the next query.
	wait func() time.Duration
	// changed is called with a result whose index differs from the index
	// sent (or the first result): the data may have changed. resync is set
	// when the reply is the first after failed queries or its index went
	// backwards (below the last good index, even across failures): Consul
	// may have lost its state and be refilling it.
	changed func(result T, index uint64, resync bool)
	// fresh, when set, reports a result to pass to changed even though its
	// index is the one sent: one built without a query (the change feed's
	// patched results), which carries the index of the read it was built on.
	fresh func(result T) bool
	// unchanged is called when a reply carries the index that was sent: by
	// the Consul blocking-query rules nothing changed (the wait timed out).
	unchanged func(index uint64)
	// reset is called when a reply's index went backwards or was 0.
	reset func(sent, got uint64)
	// failed is called after a failed fetch with the retry number (1, 2, …)
	// and the delay before that retry.
	failed func(err error, attempt int, retryIn time.Duration)
}

// nextIndex applies the index rules of the Consul documentation ("Blocking
// Queries → Implementation details") to the index sent and the index got:
//   - an index below 1 is never used for blocking: use 1, so a buggy 0 cannot
//     make every query return at once (the rate limit bounds it further);
//   - an index lower than the one sent means the Raft index was reset (e.g.
//     a restarted dev agent or a new cluster): reset to 0, a full read;
//   - otherwise block on the index got (equal means "no change").
func nextIndex(sent, got uint64) (next uint64, reset bool) {
	switch {
	case got < 1:
		return 1, true
	case got < sent:
		return 0, true
	default:
		return got, false
	}
}

// run loops until ctx is done and returns ctx.Err(). Errors are reported via
// failed and retried with backoff forever; a success resets the backoff; the
// first query after an error is a non-blocking read.
func (l *blockingLoop[T]) run(ctx context.Context) error {
	var index uint64 // 0: the first query is a non-blocking read
	var good uint64  // the index of the last successful reply
	first := true
	attempt := 0
	for {
		if err := l.limiter.Wait(ctx); err != nil {
			// Either ctx is done or its deadline comes before the next token:
			// no further query can be made in time, so wait it out.
			<-ctx.Done()
			return ctx.Err()
		}
		result, got, err := l.fetch(ctx, index, l.wait())
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			// After a failure, resync with a non-blocking read (index 0). The
			// failure may hide a reset cluster (a restarted dev agent, a
			// restore, a fail-over): a blocking query carrying the old, higher
			// index would hang there for the whole wait before the index rules
			// above could notice. The content comparison downstream keeps the
			// extra read from emitting anything when nothing changed.
			index = 0
			attempt++
			d := l.backoff.delay(attempt)
			l.failed(err, attempt, d)
			if !sleep(ctx, d) {
				return ctx.Err()
			}
			continue
		}
		recovering := attempt > 0
		attempt = 0
		sent := index
		next, reset := nextIndex(sent, got)
		// After failures the query was a read at index 0, which the rules
		// above cannot compare: compare with the last good index instead.
		if !reset && recovering && got < good {
			reset = true
		}
		if reset {
			l.reset(max(sent, good), got)
		}
		if first || got != sent || (l.fresh != nil && l.fresh(result)) {
			l.changed(result, got, !first && (reset || recovering))
		} else {
			l.unchanged(got)
		}
		first, index, good = false, next, got
	}
}

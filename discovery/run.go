package discovery

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
)

// watchSpec is what differs between watches: the endpoint, how one query is
// made, how results compare, how they merge during a resync and what is
// emitted. runWatch supplies the rest.
type watchSpec[T any] struct {
	// label is the metrics "service" label of the watch.
	label string
	// endpoint names the Consul endpoint in logs and errors.
	endpoint string
	// noun names the results in log messages ("instances", "services").
	noun  string
	log   hclog.Logger
	fetch fetchFunc[T]
	// same reports whether two results have the same content.
	same func(a, b T) bool
	// fresh, when set, marks a result built without a query (blockingLoop.fresh).
	fresh func(T) bool
	// seen, when set, is the raft index a result reflects beyond its reply's
	// (a patched result: its newest patch; 0 for none). The status and the
	// snapshot show the higher of the two.
	seen func(T) uint64
	// size is the number of entries of a result, for the status and logs.
	size func(T) int
	// merge returns what to emit for result while a resync is in progress,
	// given base, the last set emitted, and whether it kept back anything of
	// base that result lacks.
	merge func(base, result T) (out T, held bool)
	// settles reports whether result shows that Consul's state is back,
	// ending the resync at once.
	settles func(result T) bool
	// emit receives a result that differs from the last emitted one (and
	// the first one).
	emit func(result T, index uint64, at time.Time)
	// quiet logs the first sync at debug: the watch follows a change feed,
	// which logs once for all its services (at 5,000 services, one line per
	// watch drowns the log).
	quiet bool
	// seed, when set, is the set a previous watch of the same query emitted
	// (an agent reload that made a new client): the first answer is a resync
	// against it, and it is what the watch emits if that answer is held.
	seed *T
}

// runWatch drives spec with the generic blocking loop, owning everything
// watches have in common: content comparison before emitting, the status,
// the metrics, the logs of failures and recoveries, backoff, and the resync
// grace.
//
// Resync grace: right after an outage or an index reset, Consul may be
// refilling a lost state (a restarted dev agent or server whose services
// anti-entropy has not synced yet). For Config.ResyncGrace from the first
// answer after it, answers go through spec.merge, which keeps what they lack
// of the last set (all of it for an instance watch answering empty; the
// missing services for the catalog). The watch keeps querying, its wait
// bounded by the grace left while something is held, and applies the answer
// as it is when the grace ends or as soon as spec.settles says Consul's state
// is back.
func runWatch[T any](ctx context.Context, c *Client, w *watchState, spec watchSpec[T]) error {
	log, endpoint := spec.log, spec.endpoint
	var last T // the last set emitted, or the seed
	emitted, hasLast := false, spec.seed != nil
	if hasLast {
		last = *spec.seed
	}
	failures := 0 // consecutive, for the recovery log line
	answered := false
	var resyncUntil time.Time // zero: no resync in progress
	var pending T             // the answer as Consul gave it, while holding
	holding := false
	feedFailed := false // the failures were the change feed's, which logs its own recovery
	recovered := func(index uint64) {
		if failures > 0 {
			if feedFailed {
				log.Debug("read again after the change feed recovered", "endpoint", endpoint, "index", index)
			} else {
				log.Info("consul query succeeded again", "endpoint", endpoint, "failures", failures, "index", index)
			}
			failures, feedFailed = 0, false
		}
	}
	apply := func(result T, index uint64, now time.Time) {
		if emitted && spec.same(last, result) {
			return
		}
		n := spec.size(result)
		switch {
		case emitted:
			log.Debug(spec.noun+" changed", spec.noun, n, "index", index)
		case spec.quiet:
			log.Debug("synced", spec.noun, n, "index", index)
		default:
			log.Info("synced", spec.noun, n, "index", index)
		}
		last, emitted, hasLast = result, true, true
		w.update(func(s *WatchStatus) { s.Synced, s.Instances = true, n })
		spec.emit(result, index, now)
	}
	info, warn := log.Info, log.Warn
	released := func(index uint64, result T) {
		info("consul reports the "+spec.noun+" kept again; resync hold released", "endpoint", endpoint, "index", index, spec.noun, spec.size(result))
	}
	// answer applies a successful answer, through the resync rules.
	answer := func(result T, index uint64, resync bool) {
		now := time.Now()
		if resync && hasLast && c.cfg.ResyncGrace > 0 {
			resyncUntil = now.Add(c.cfg.ResyncGrace)
		}
		if !resyncUntil.IsZero() && now.Before(resyncUntil) && !spec.settles(result) {
			out, held := spec.merge(last, result)
			if !held && holding {
				released(index, result)
			}
			if held && !holding {
				warn("consul's answer right after an outage or index reset lacks "+spec.noun+" it had; keeping them during the resync grace",
					"endpoint", endpoint, "index", index, "resync_grace", c.cfg.ResyncGrace,
					spec.noun, spec.size(result), "kept", spec.size(out)-spec.size(result))
				c.metrics.resyncHeld(spec.label)
			}
			pending, holding = result, held
			apply(out, index, now)
			return
		}
		switch {
		case holding && now.Before(resyncUntil):
			released(index, result)
		case holding:
			warn("the resync grace ended; applying consul's answer, which still lacks "+spec.noun+" kept during it",
				"endpoint", endpoint, "index", index, "resync_grace", c.cfg.ResyncGrace, spec.noun, spec.size(result))
		}
		resyncUntil, holding = time.Time{}, false
		apply(result, index, now)
	}
	var shown uint64 // the index of the last answer, as shown (seen)
	loop := &blockingLoop[T]{
		fetch:   spec.fetch,
		fresh:   spec.fresh,
		limiter: rate.NewLimiter(rate.Limit(c.cfg.Rate), c.cfg.Burst),
		backoff: backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff},
		wait: func() time.Duration {
			if holding {
				// Wake up when the grace ends, to apply what is held.
				return min(c.cfg.Wait, max(time.Until(resyncUntil), 10*time.Millisecond))
			}
			return c.cfg.Wait
		},
		changed: func(result T, index uint64, resync bool) {
			recovered(index)
			if spec.seen != nil {
				index = max(index, spec.seen(result))
			}
			shown = index
			c.succeeded(spec.label, w, index, time.Now())
			// A seeded watch's first answer may come from another Consul
			// or one still refilling: a resync against the seed.
			answer(result, index, resync || !answered)
			answered = true
		},
		unchanged: func(index uint64) {
			recovered(index)
			index = max(index, shown) // a patched result showed a newer one
			c.succeeded(spec.label, w, index, time.Now())
			if holding {
				answer(pending, index, false)
			}
		},
		reset: func(sent, got uint64) {
			log.Debug("blocking index went backwards or was 0; resetting", "endpoint", endpoint, "sent", sent, "got", got)
			c.metrics.indexReset(spec.label)
		},
		failed: func(err error, attempt int, retryIn time.Duration) {
			var fd *feedDown
			if errors.As(err, &fd) {
				// The feed logged and counted it; the watch reads again
				// once the feed recovers.
				log.Debug("the change feed failed; waiting for it to recover", "error", fd.err)
				failures, feedFailed = attempt, true
				w.update(func(s *WatchStatus) { s.LastError, s.LastErrorReason = fd.Error(), fd.err.reason })
				return
			}
			var qe *queryError
			if !errors.As(err, &qe) {
				qe = classify(endpoint, err)
			}
			qe.hint = c.hint(qe)
			args := []any{"endpoint", qe.endpoint, "status", qe.status, "reason", qe.reason,
				"error", qe.err, "attempt", attempt, "retry_in", retryIn}
			if qe.hint != "" {
				args = append(args, "hint", qe.hint)
			}
			log.Warn("consul query failed; keeping the last known "+spec.noun, args...)
			failures = attempt
			c.metrics.queryError(spec.label, qe.reason)
			w.update(func(s *WatchStatus) { s.LastError, s.LastErrorReason = qe.Error(), qe.reason })
		},
	}
	return loop.run(ctx)
}

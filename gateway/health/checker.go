package health

import (
	"context"
	"math/rand/v2"
	"time"
)

// Probe performs one active check and reports whether it passed; reason
// names the failure ("timeout", "connect", "status 503", ...). It must
// return within the timeout carried by ctx.
type Probe func(ctx context.Context) (ok bool, reason string)

// RunChecks probes every interval (±10% jitter, so checks of many backends
// spread out) until ctx is done, feeding s. The first check runs after a
// random fraction of one interval. A probe that hangs is cut off by the
// timeout and counts as a failure; it never delays other backends' checks,
// which run in their own goroutines. For a state that inherited a check
// (State.Inherit), the first one is due an interval after that check.
func RunChecks(ctx context.Context, cfg ActiveConfig, probe Probe, s *State) {
	first := time.Duration(rand.Int64N(int64(cfg.Interval)/10 + 1))
	if since, ok := s.sinceLastCheck(); ok {
		// An inherited state (a reload rebuilt the upstream): the next
		// check is due an interval after the last one, so reloads never
		// add checks that count towards the thresholds.
		first = max(0, jitter(cfg.Interval)-since)
	}
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		ok, reason := probe(pctx)
		timedOut := pctx.Err() == context.DeadlineExceeded
		cancel()
		if ctx.Err() != nil {
			return
		}
		if timedOut {
			ok, reason = false, "timeout"
		}
		s.ObserveCheck(ok, reason)
		t.Reset(jitter(cfg.Interval))
	}
}

func jitter(d time.Duration) time.Duration {
	j := int64(d) / 10
	if j <= 0 {
		return d
	}
	return d - time.Duration(j) + time.Duration(rand.Int64N(2*j+1))
}

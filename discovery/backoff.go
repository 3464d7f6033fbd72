package discovery

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// backoff computes retry delays: exponential from min, capped at max, with
// "equal jitter" so the delay of attempt n lies in [d/2, d] where
// d = min(max, min·2^(n-1)). Jitter spreads the retries of many watches after a
// shared outage (idea: consul lib/retry).
type backoff struct {
	min, max time.Duration
	// jitter returns a value in [0, n]; nil uses math/rand/v2.
	jitter func(n int64) int64
}

// delay returns the wait before retry number attempt (1 for the first retry).
func (b backoff) delay(attempt int) time.Duration {
	d := b.min
	for i := 1; i < attempt && d < b.max && d <= math.MaxInt64/2; i++ {
		d *= 2
	}
	d = min(d, b.max)
	half := int64(d / 2)
	j := b.jitter
	if j == nil {
		j = func(n int64) int64 { return rand.Int64N(n + 1) }
	}
	return time.Duration(int64(d) - half + j(half))
}

// sleep waits for d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

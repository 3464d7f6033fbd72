package retry

import "fmt"

// Budget is Envoy's retry_budget (Linkerd's retryRatio is its ratio form):
// the retries in flight to an upstream, hedges included, may not exceed
// Percent % of the requests active there, and never fall below
// MinConcurrency. A storm against failing backends then costs them at most
// about (1 + Percent/100) × the requests, not Attempts × the requests (case
// R04).
type Budget struct {
	// Percent of the active requests that may be retries, 0..100 (default
	// 20).
	Percent int
	// MinConcurrency is the retries allowed in flight whatever the active
	// count, ≥ 0 (default 3).
	MinConcurrency int
}

// Validate reports a field out of range.
func (b Budget) Validate() error {
	switch {
	case b.Percent < 0 || b.Percent > 100:
		return fmt.Errorf("retry: budget_percent %d out of range (0..100)", b.Percent)
	case b.MinConcurrency < 0:
		return fmt.Errorf("retry: min_retry_concurrency %d is negative", b.MinConcurrency)
	}
	return nil
}

// Limit is the number of retries allowed in flight while active requests
// (retries included) are in flight to the upstream:
// max(MinConcurrency, Percent × active / 100).
func (b Budget) Limit(active int64) int64 {
	return max(int64(b.MinConcurrency), active*int64(b.Percent)/100)
}

// Allows reports whether one more retry may start while inFlight retries
// are running and active requests (retries included) are in flight.
func (b Budget) Allows(inFlight, active int64) bool { return inFlight < b.Limit(active) }

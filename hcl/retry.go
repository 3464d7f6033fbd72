package hcl

import (
	"fmt"
	"slices"
	"strings"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Defaults and bounds of upstream.retry and upstream.hedge (interface.md;
// the gateway's retry package holds the same values and the semantics).
const (
	// DefaultRetryAttempts is retry.attempts when absent: tries of one
	// request, the first included (one retry).
	DefaultRetryAttempts = 2
	// MaxRetryAttempts bounds retry.attempts.
	MaxRetryAttempts = 10
	// DefaultRetryBackoff is retry.backoff when absent: the base of the
	// jittered exponential back-off, whose cap is 10 × the base (Envoy's).
	DefaultRetryBackoff = 25 * time.Millisecond
	// MaxRetryBackoff bounds retry.backoff.
	MaxRetryBackoff = 10 * time.Second
	// DefaultRetryMaxBodyBytes is retry.max_body_bytes when absent (64 KiB).
	DefaultRetryMaxBodyBytes = 64 << 10
	// MaxRetryMaxBodyBytes bounds retry.max_body_bytes (16 MiB).
	MaxRetryMaxBodyBytes = 16 << 20
	// DefaultRetryBudgetPercent is retry.budget_percent when absent.
	DefaultRetryBudgetPercent = 20
	// DefaultMinRetryConcurrency is retry.min_retry_concurrency when absent.
	DefaultMinRetryConcurrency = 3
	// DefaultHedgeMax is hedge.max when absent; MaxHedges bounds it.
	DefaultHedgeMax = 1
	MaxHedges       = 5
)

// retryConditions are the accepted retry.on values (gateway/retry's
// conditions, in its order).
var retryConditions = []string{"connect-failure", "refused-stream", "reset", "502", "503", "504"}

// DefaultRetryOn is retry.on when absent: the failures that prove the
// backend never saw the request, and "reset" (for idempotent methods only,
// a request in flight to a backend that died or timed out is sent again).
var DefaultRetryOn = []string{"connect-failure", "refused-stream", "reset"}

// RetryConditions returns the accepted retry.on values.
func RetryConditions() []string { return slices.Clone(retryConditions) }

// Retry is upstream.retry: when a failed try is sent again to another
// backend. Every field is defaulted when absent (DefaultRetry).
type Retry struct {
	// Attempts is how many times a request may be sent, the first try
	// included, 1..10 (default 2: one retry; 1 turns retries off).
	Attempts int
	// On are the conditions retried, each one of RetryConditions, not
	// empty, no duplicates (default DefaultRetryOn). "connect-failure" and
	// "refused-stream" hold for every method; "reset" (a broken connection
	// or a try's timeout before the response) and "502", "503", "504" (the
	// backend's answer) for idempotent methods only.
	On []string
	// PerTryTimeout bounds each try's wait for response headers; 0 (the
	// default) leaves it to timeouts.response_header.
	PerTryTimeout time.Duration
	// Backoff is the base of the jittered exponential wait before a retry,
	// > 0, at most 10s (default 25ms; the cap is 10 × Backoff).
	Backoff time.Duration
	// MaxBodyBytes is the request body kept so that it can be sent again,
	// 0..16 MiB (default 64 KiB); a longer body is not retried once sent,
	// 0 keeps none.
	MaxBodyBytes int64
	// BudgetPercent of the requests active at the upstream may be retries
	// in flight, 0..100 (default 20), but never fewer than
	// MinRetryConcurrency (default 3; ≥ 0).
	BudgetPercent, MinRetryConcurrency int
}

// DefaultRetry returns the retry settings of an upstream without a retry
// block.
func DefaultRetry() Retry {
	return Retry{
		Attempts: DefaultRetryAttempts, On: slices.Clone(DefaultRetryOn), Backoff: DefaultRetryBackoff,
		MaxBodyBytes: DefaultRetryMaxBodyBytes, BudgetPercent: DefaultRetryBudgetPercent, MinRetryConcurrency: DefaultMinRetryConcurrency,
	}
}

// Hedge is upstream.hedge: copies of a slow GET, HEAD or OPTIONS without a
// body sent to other backends.
type Hedge struct {
	// Delay is the wait for an answer before each copy (required, > 0, at
	// most 1m).
	Delay time.Duration
	// Max is the number of copies, 1..5 (default 1).
	Max int
}

// rawRetry is upstream.retry.
type rawRetry struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Attempts            *hcl2.Attribute `hcl:"attempts,optional"`
	On                  *hcl2.Attribute `hcl:"on,optional"`
	PerTryTimeout       *hcl2.Attribute `hcl:"per_try_timeout,optional"`
	Backoff             *hcl2.Attribute `hcl:"backoff,optional"`
	MaxBodyBytes        *hcl2.Attribute `hcl:"max_body_bytes,optional"`
	BudgetPercent       *hcl2.Attribute `hcl:"budget_percent,optional"`
	MinRetryConcurrency *hcl2.Attribute `hcl:"min_retry_concurrency,optional"`
}

// rawHedge is upstream.hedge.
type rawHedge struct {
	DefRange hcl2.Range `hcl:",def_range"`

	Delay *hcl2.Attribute `hcl:"delay,optional"`
	Max   *hcl2.Attribute `hcl:"max,optional"`
}

func (r *rawRetry) defRange() hcl2.Range { return r.DefRange }
func (r *rawHedge) defRange() hcl2.Range { return r.DefRange }

// buildRetry converts upstream.retry (nil: the defaults).
func buildRetry(b blk, r *rawRetry) Retry {
	rt := DefaultRetry()
	if r == nil {
		return rt
	}
	b = b.child("retry", r.DefRange)
	rt.Attempts, _ = b.integer(r.Attempts, DefaultRetryAttempts, 1, MaxRetryAttempts)
	if r.On != nil && b.listLen(r.On) == 0 {
		b.errorf(r.On, "", "Invalid value", "must list at least one condition; attempts = 1 turns retries off.")
	} else if r.On != nil {
		seen := map[string]bool{}
		rt.On = b.strList(r.On, func(s string) string {
			switch {
			case !slices.Contains(retryConditions, s):
				return fmt.Sprintf("%q is not a retry condition; use %s", s, strings.Join(retryConditions, ", "))
			case seen[s]:
				return fmt.Sprintf("%q is listed twice", s)
			}
			seen[s] = true
			return ""
		})
	}
	rt.PerTryTimeout = b.duration(r.PerTryTimeout, 0, 0, 0)
	rt.Backoff = b.duration(r.Backoff, DefaultRetryBackoff, positive, MaxRetryBackoff)
	body, _ := b.integer(r.MaxBodyBytes, DefaultRetryMaxBodyBytes, 0, MaxRetryMaxBodyBytes)
	rt.MaxBodyBytes = int64(body)
	rt.BudgetPercent, _ = b.integer(r.BudgetPercent, DefaultRetryBudgetPercent, 0, 100)
	rt.MinRetryConcurrency, _ = b.integer(r.MinRetryConcurrency, DefaultMinRetryConcurrency, 0, maxCount)
	return rt
}

// listLen is the number of elements a list attribute has (0 when it is not
// a list).
func (b blk) listLen(a *hcl2.Attribute) int {
	exprs, ds := hcl2.ExprList(a.Expr)
	if ds.HasErrors() {
		return -1
	}
	return len(exprs)
}

// buildHedge converts upstream.hedge (nil: off).
func buildHedge(b blk, r *rawHedge) *Hedge {
	if r == nil {
		return nil
	}
	b = b.child("hedge", r.DefRange)
	h := &Hedge{Delay: b.duration(r.Delay, 0, positive, time.Minute)}
	if r.Delay == nil {
		b.errorf(nil, "delay", "Missing hedge delay", "delay is required: how long a request waits for an answer before a copy goes to another backend, as in \"50ms\".")
	}
	h.Max, _ = b.integer(r.Max, DefaultHedgeMax, 1, MaxHedges)
	return h
}

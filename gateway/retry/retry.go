// Package retry holds the decisions of an upstream's attempt loop: which
// failed attempts may be tried again (Policy), how many retries may run at
// once (Budget), how long to wait before one (Policy.Backoff) and when a
// request is hedged (Hedge). Every decision is a pure function of its
// inputs; the gateway's attempt loop gathers them (what failed, how many
// tries, what is in flight) and acts on the answers.
//
// The semantics follow Envoy's router (retry_on conditions, retry_budget,
// jittered exponential back-off: source/common/router/retry_state_impl.cc)
// and Linkerd's retry budget, restricted as case R03 asks: a request a
// backend may have run is tried again only when its method is idempotent
// (RFC 9110 §9.2.2), and never once a response byte reached the client.
package retry

import (
	"fmt"
	"math/bits"
	"net/http"
	"strings"
	"time"
)

// Condition is a set of retry conditions, the `on` values of an upstream's
// retry block.
type Condition uint8

// The conditions. ConnectFailure and RefusedStream prove the backend never
// saw the request, so they hold for every method; the others only for
// idempotent methods.
const (
	// ConnectFailure: the connection could not be opened (refused, timed
	// out, TLS handshake or ALPN failed).
	ConnectFailure Condition = 1 << iota
	// RefusedStream: an HTTP/2 backend refused the stream (REFUSED_STREAM)
	// or left it unprocessed under a GOAWAY (RFC 9113 §8.7, §6.8).
	RefusedStream
	// Reset: the connection broke, or the try's wait for response headers
	// (per_try_timeout, else response_header) ran out, before a response.
	Reset
	// Status502, Status503 and Status504: the backend answered with that
	// status.
	Status502
	Status503
	Status504
)

// Outlier is not an `on` value: the condition of a 5xx answer from a
// backend outlier detection is taking out (Failure.Ejected), retried for
// idempotent methods whatever On says; "outlier" in impulse_retries.
const Outlier Condition = 1 << 6

// DefaultOn is the `on` list when absent: the failures that prove the
// backend never saw the request (every method), and a broken connection
// or a timeout before the response (Reset, idempotent methods only: a GET
// in flight to a backend that died is sent again, as nginx's default
// proxy_next_upstream "error timeout" does).
const DefaultOn = ConnectFailure | RefusedStream | Reset

// conditionNames are the `on` values, in Condition bit order.
var conditionNames = [...]string{"connect-failure", "refused-stream", "reset", "502", "503", "504"}

// ConditionNames lists the valid `on` values.
func ConditionNames() []string { return append([]string(nil), conditionNames[:]...) }

// ParseCondition returns the condition named s (an `on` value); false when
// s names none.
func ParseCondition(s string) (Condition, bool) {
	for i, n := range conditionNames {
		if s == n {
			return 1 << i, true
		}
	}
	return 0, false
}

// String is the `on` value of a single condition (the reason label of
// impulse_retries), or the values of a set joined by ",".
func (c Condition) String() string {
	var names []string
	for i, n := range conditionNames {
		if c&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// Label is the reason label of a single condition, without allocating
// (String of a set allocates).
func (c Condition) Label() string {
	if c == Outlier {
		return "outlier"
	}
	for i, n := range conditionNames {
		if c == 1<<i {
			return n
		}
	}
	return c.String()
}

// StatusCondition is the condition of a backend's answer with status code,
// 0 for codes no condition names.
func StatusCondition(code int) Condition {
	switch code {
	case http.StatusBadGateway:
		return Status502
	case http.StatusServiceUnavailable:
		return Status503
	case http.StatusGatewayTimeout:
		return Status504
	}
	return 0
}

// Defaults of a retry block (interface.md).
const (
	DefaultAttempts            = 2
	DefaultBackoff             = 25 * time.Millisecond
	DefaultMaxBackoff          = 250 * time.Millisecond
	DefaultMaxBodyBytes        = 64 << 10
	DefaultBudgetPercent       = 20
	DefaultMinRetryConcurrency = 3

	// MaxAttempts bounds Policy.Attempts.
	MaxAttempts = 10
)

// Policy is an upstream's retry block. The zero Policy is not valid; use
// Default and change fields, or check with Validate.
type Policy struct {
	// Attempts is how many times one request may be sent, the first try
	// included: 1 turns retries off, 2 (the default) allows one retry
	// (Envoy's num_retries = 1). 1..MaxAttempts. Hedges are counted apart
	// (Hedge.Max).
	Attempts int
	// On is the set of conditions retried (default DefaultOn).
	On Condition
	// PerTryTimeout bounds each try's wait for response headers; 0 means
	// the upstream's response_header timeout alone. A try past it is
	// abandoned as a Reset. ≥ 0.
	PerTryTimeout time.Duration
	// Backoff is the base of the jittered exponential wait before a retry
	// (default 25 ms), MaxBackoff its cap (default 250 ms, ≥ Backoff).
	Backoff, MaxBackoff time.Duration
	// MaxBodyBytes bounds the request body kept so it can be sent again
	// (default 64 KiB): a longer body is not retried once sent, and 0 keeps
	// none. It is also what an HTTP/2 backend's transport may replay after
	// REFUSED_STREAM or GOAWAY. ≥ 0.
	MaxBodyBytes int64
	// Budget bounds the retries (and hedges) in flight.
	Budget Budget
}

// Default returns the policy of an upstream without a retry block.
func Default() Policy {
	return Policy{
		Attempts: DefaultAttempts, On: DefaultOn,
		Backoff: DefaultBackoff, MaxBackoff: DefaultMaxBackoff,
		MaxBodyBytes: DefaultMaxBodyBytes,
		Budget:       Budget{Percent: DefaultBudgetPercent, MinConcurrency: DefaultMinRetryConcurrency},
	}
}

// Validate reports the first field out of its range.
func (p Policy) Validate() error {
	switch {
	case p.Attempts < 1 || p.Attempts > MaxAttempts:
		return fmt.Errorf("retry: attempts %d out of range (1..%d)", p.Attempts, MaxAttempts)
	case p.On >= 1<<len(conditionNames):
		return fmt.Errorf("retry: unknown condition bits %#x", uint8(p.On))
	case p.PerTryTimeout < 0:
		return fmt.Errorf("retry: per_try_timeout %v is negative", p.PerTryTimeout)
	case p.Backoff <= 0 || p.MaxBackoff < p.Backoff:
		return fmt.Errorf("retry: backoff %v must be > 0 and at most its maximum %v", p.Backoff, p.MaxBackoff)
	case p.MaxBodyBytes < 0:
		return fmt.Errorf("retry: max_body_bytes %d is negative", p.MaxBodyBytes)
	}
	return p.Budget.Validate()
}

// Failure is what went wrong with one try, as the attempt loop saw it.
type Failure struct {
	// Condition is the single condition the failure matches; 0 for one
	// no condition covers (the client went away, a TLS certificate the
	// gateway rejects, an invalid response...): never retried.
	Condition Condition
	// Method is the request's method.
	Method string
	// Tries is how many tries of the request have been sent, this one
	// included (hedges not counted).
	Tries int
	// Started: a response byte reached the client (a 1xx other than
	// 100 Continue, or the final response).
	Started bool
	// BodyKept: the request body, if any, can be sent again (none was
	// read, or all that was read is kept within MaxBodyBytes).
	BodyKept bool
	// Ejected: a 5xx answer from a backend outlier detection is taking
	// out (health.State.Strike): the backend's failure, not the
	// application's word, so an idempotent request is tried elsewhere
	// whatever On says.
	Ejected bool
}

// Retry reports whether f may be tried again under p (the budget and the
// choice of a backend aside): its condition is in On, tries are left,
// nothing reached the client, the body can be replayed, and the method is
// idempotent unless the backend provably never saw the request.
func (p Policy) Retry(f Failure) bool {
	switch {
	case f.Tries >= p.Attempts || f.Started || !f.BodyKept:
		return false
	case f.Ejected:
		return Idempotent(f.Method)
	case f.Condition == 0 || p.On&f.Condition == 0:
		return false
	case f.Condition == ConnectFailure || f.Condition == RefusedStream:
		return true
	}
	return Idempotent(f.Method)
}

// Idempotent reports whether method is idempotent (RFC 9110 §9.2.2): GET,
// HEAD, OPTIONS, TRACE, PUT and DELETE. POST, PATCH and unknown methods are
// not: a backend may have acted on them before it failed.
func Idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// Wait is the back-off before retry number n (1 for the first retry): a
// uniformly random duration in [0, min(Backoff × 2^(n-1), MaxBackoff)),
// Envoy's jittered exponential back-off ("full jitter"). rnd is a uniform
// random 64-bit value.
func (p Policy) Wait(n int, rnd uint64) time.Duration {
	ceil := p.MaxBackoff
	if n < 1 {
		n = 1
	}
	if n <= 32 {
		if d := p.Backoff << (n - 1); d > 0 && d < ceil {
			ceil = d
		}
	}
	if ceil <= 0 {
		return 0
	}
	hi, _ := bits.Mul64(rnd, uint64(ceil)) // ⌊rnd × ceil / 2⁶⁴⌋: uniform in [0, ceil)
	return time.Duration(hi)
}

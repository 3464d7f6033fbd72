// Package health tracks one backend's health from two sources that stay
// separate: active checks (consecutive-threshold transitions) and passive
// outcome tracking of real requests (outlier ejection). Eligible combines
// them without a clock read, so selection can call it on the hot path.
package health

import (
	"sync"
	"sync/atomic"
	"time"
)

// Status is the active-check health of a backend.
type Status uint8

// Active-check states. A backend starts Unknown until its first check.
const (
	Unknown Status = iota
	Healthy
	Unhealthy
)

// String returns "unknown", "healthy" or "unhealthy", as shown in /v1/backends.
func (s Status) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Unhealthy:
		return "unhealthy"
	default:
		return "unknown"
	}
}

// Outcome classifies one proxied request for passive tracking.
type Outcome uint8

// Outcomes: Success (a response below 500), Failure (connect error, reset,
// timeout or 5xx), Neutral (the client went away; says nothing about the
// backend).
const (
	Neutral Outcome = iota
	Success
	Failure
)

// ActiveConfig is the health_check block. Thresholds count consecutive
// results, not totals (case B25).
type ActiveConfig struct {
	// Path is the request target on the backend, e.g. "/health" or
	// "/status?full=1" (origin-form, RFC 9112 §3.2.1). Unused when GRPC.
	Path string
	// GRPC makes the check a gRPC health check: a unary call of
	// grpc.health.v1.Health/Check (grpc/grpc doc/health-checking.md) over
	// the backend's HTTP/2 connection (h2c or TLS) instead of a GET of
	// Path; only the status SERVING passes. An http:// (HTTP/1.1) backend
	// always fails it.
	GRPC bool
	// GRPCService is the service name the gRPC check asks about; "" asks
	// about the server as a whole, as the health protocol defines.
	GRPCService string
	// Interval between checks (jittered ±10% by the checker) and the
	// Timeout of one check.
	Interval, Timeout time.Duration
	// HealthyThreshold consecutive passes make an unhealthy backend healthy;
	// UnhealthyThreshold consecutive failures make a healthy or unknown one
	// unhealthy. Both ≥ 1.
	HealthyThreshold, UnhealthyThreshold int
	// UnknownIsHealthy lets a backend receive traffic before its first check
	// completes (default true in the agent: a new instance is usable at once).
	UnknownIsHealthy bool
}

// PassiveConfig is the outlier_detection block.
type PassiveConfig struct {
	// ConsecutiveFailures ejects a backend after this many failures in a row
	// (≥ 1).
	ConsecutiveFailures int
	// BaseEjectionTime × the number of times the backend was ejected is the
	// ejection length, capped at MaxEjectionTime (default 10 × base).
	BaseEjectionTime, MaxEjectionTime time.Duration
	// MaxEjectionPercent bounds the share of an upstream's backends ejected
	// at once, 0..100 (enforced by Budget).
	MaxEjectionPercent int
}

// Budget enforces max_ejection_percent across one upstream. Safe for
// concurrent use.
type Budget struct {
	ejected atomic.Int64
	// Size returns the number of backends the percentage applies to.
	Size func() int
}

// tryEject reserves one ejection if the upstream stays within pct.
func (b *Budget) tryEject(pct int) bool {
	if b == nil {
		return true
	}
	n := b.Size()
	for {
		cur := b.ejected.Load()
		if (cur+1)*100 > int64(pct)*int64(n) {
			return false
		}
		if b.ejected.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

func (b *Budget) release() {
	if b != nil {
		b.ejected.Add(-1)
	}
}

// Ejected is the number of backends currently ejected.
func (b *Budget) Ejected() int64 { return b.ejected.Load() }

// Transition is reported whenever a backend's active status or ejection
// changes.
type Transition struct {
	From, To Status
	// Ejected is true for an ejection, Returned for the end of one; both are
	// false for an active-check transition.
	Ejected, Returned bool
	// Reason is the canonical reason of the last failure ("timeout",
	// "status 503", "connect", ...), empty on recovery.
	Reason string
	// Until is the end of an ejection.
	Until time.Time
}

// State is one backend's health. The zero value is not usable; use New.
type State struct {
	active  *ActiveConfig
	passive *PassiveConfig
	budget  *Budget
	notify  func(Transition)

	// Read on the hot path without the lock.
	usable  atomic.Bool // active status admits traffic
	ejected atomic.Bool
	// ejectedAt is when the running ejection began (UnixNano; 0: none),
	// for the fallback of an upstream whose every member is ejected.
	ejectedAt atomic.Int64
	// failing: the last outcome of a request was a failure (tracked with
	// or without outlier detection), for the retry state.
	failing atomic.Bool
	// strikes counts the 5xx answers in a row as they arrive (Strike),
	// ahead of their Observe at the end of the try.
	strikes atomic.Int64

	mu          sync.Mutex // guards everything below
	status      Status
	reason      string
	okRun       int
	failRun     int
	passiveRun  int
	ejections   int
	ejectedTill time.Time
	timer       *time.Timer
	closed      bool
	lastCheck   time.Time // when the last active-check result was observed
	lastOK      bool      // the last active-check result
	lastReason  string    // its failure reason ("" when it passed)
	lastChange  time.Time // the last status change, ejection or return (New: creation)
}

// New returns the state of one backend. active and passive may be nil
// (feature off); budget may be nil (no cap); notify (may be nil) is called
// with each transition, outside the lock.
func New(active *ActiveConfig, passive *PassiveConfig, budget *Budget, notify func(Transition)) *State {
	s := &State{active: active, passive: passive, budget: budget, notify: notify, lastChange: time.Now()}
	s.usable.Store(active == nil || active.UnknownIsHealthy)
	return s
}

// Eligible reports whether the backend may receive traffic: active status
// admits it and it is not ejected. Lock-free, no clock read.
func (s *State) Eligible() bool { return s.usable.Load() && !s.ejected.Load() }

// Usable reports whether the active status admits traffic, ejection
// aside: an ejected backend that is Usable may still take a request when
// every member of its upstream is ejected (the upstream is never empty).
func (s *State) Usable() bool { return s.usable.Load() }

// EjectedSince is when the running ejection began; zero when the backend
// is not ejected.
func (s *State) EjectedSince() time.Time {
	if n := s.ejectedAt.Load(); n != 0 && s.ejected.Load() {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Failing reports whether the backend's last request outcome was a
// failure (a success clears it; neutral outcomes leave it), whether or not
// outlier detection is configured.
func (s *State) Failing() bool { return s.failing.Load() }

// Strike counts a 5xx answer as it arrives, before the try that got it
// ends (its Observe comes after the body is relayed), and reports whether
// it is beyond what outlier detection lets through: the backend is
// ejected, or its 5xx answers in a row now exceed consecutive_failures.
// Concurrent requests to a backend answering 5xx to everything would
// otherwise all pass the same "not ejected yet". false without outlier
// detection. A success (Observe) starts the count again.
func (s *State) Strike() (over bool) {
	if s.passive == nil {
		return false
	}
	n := s.strikes.Add(1)
	return s.ejected.Load() || n > int64(s.passive.ConsecutiveFailures)
}

// Checked reports whether active checks are configured for the backend.
func (s *State) Checked() bool { return s.active != nil }

// Snapshot returns the active status, its canonical reason and the ejection
// end (zero when not ejected).
func (s *State) Snapshot() (Status, string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var till time.Time
	if s.ejected.Load() {
		till = s.ejectedTill
	}
	return s.status, s.reason, till
}

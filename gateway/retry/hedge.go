package retry

import (
	"fmt"
	"net/http"
	"time"
)

// MaxHedges bounds Hedge.Max.
const MaxHedges = 5

// DefaultHedgeMax is hedge.max when absent.
const DefaultHedgeMax = 1

// Hedge is an upstream's hedge block: a request that has no response
// Delay after it was sent is sent to another backend as well, up to Max
// more times (one more every Delay); the first response wins and the
// others are canceled. Only safe methods without a body are hedged, since
// every copy runs. The zero Hedge (Delay 0) is off.
type Hedge struct {
	// Delay is the wait for a response before the next copy, > 0 when on.
	Delay time.Duration
	// Max is the number of hedged copies beyond the first try,
	// 1..MaxHedges (default 1).
	Max int
}

// On reports whether hedging is configured.
func (h Hedge) On() bool { return h.Delay > 0 }

// Validate reports a field out of range; the zero Hedge is valid (off).
func (h Hedge) Validate() error {
	switch {
	case h == Hedge{}:
		return nil
	case h.Delay <= 0:
		return fmt.Errorf("retry: hedge needs a delay > 0")
	case h.Max < 1 || h.Max > MaxHedges:
		return fmt.Errorf("retry: hedge max %d out of range (1..%d)", h.Max, MaxHedges)
	}
	return nil
}

// Applies reports whether a request with method, with or without a body,
// is hedged: hedging is on and the request is a GET, HEAD or OPTIONS
// (safe methods, RFC 9110 §9.2.1) without a body.
func (h Hedge) Applies(method string, hasBody bool) bool {
	if !h.On() || hasBody {
		return false
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// Next reports whether another copy may be sent once Delay passed without
// an answer, sent copies having gone out: fewer than Max. The retry budget
// is asked too (Budget.Allows), by the caller, which knows the counts.
func (h Hedge) Next(sent int) bool { return h.On() && sent < h.Max }

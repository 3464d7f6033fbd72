package upstream

import (
	"sync/atomic"
	"time"
)

// ResponseCounts are cumulative response counts by status class, for the
// status page (HAProxy's "responses by class" and "errors").
type ResponseCounts struct {
	Informational uint64 `json:"1xx"`
	Success       uint64 `json:"2xx"`
	Redirect      uint64 `json:"3xx"`
	ClientError   uint64 `json:"4xx"` // with 499, the client closed the request
	ServerError   uint64 `json:"5xx"`
	// Other counts status codes outside 100..599.
	Other uint64 `json:"other,omitempty"`
	// Errors counts the answers of 500 and above the gateway produced
	// itself (x-impulse-error set: connect failure, reset, timeout, no
	// eligible backend, overload), a subset of ServerError.
	Errors uint64 `json:"errors"`
}

// Total is the number of responses counted.
func (c ResponseCounts) Total() uint64 {
	return c.Informational + c.Success + c.Redirect + c.ClientError + c.ServerError + c.Other
}

// Sub returns c - old, class by class; a class that went down (the
// counter was replaced) counts from zero.
func (c ResponseCounts) Sub(old ResponseCounts) ResponseCounts {
	d := func(a, b uint64) uint64 {
		if a < b {
			return a
		}
		return a - b
	}
	return ResponseCounts{d(c.Informational, old.Informational), d(c.Success, old.Success), d(c.Redirect, old.Redirect),
		d(c.ClientError, old.ClientError), d(c.ServerError, old.ServerError), d(c.Other, old.Other), d(c.Errors, old.Errors)}
}

// ResponseCounter counts responses by class with atomics: Count costs two
// atomic adds and never allocates. The zero value is ready to use.
type ResponseCounter struct {
	classes [6]atomic.Uint64 // other, 1xx..5xx
	errors  atomic.Uint64
}

// Count counts one response with HTTP status code status; gatewayError
// says the gateway produced it (a canonical reason is set).
func (c *ResponseCounter) Count(status int, gatewayError bool) {
	i := 0
	if status >= 100 && status <= 599 {
		i = status / 100
	}
	c.classes[i].Add(1)
	if gatewayError && status >= 500 {
		c.errors.Add(1)
	}
}

// Load returns the counts so far.
func (c *ResponseCounter) Load() ResponseCounts {
	return ResponseCounts{Other: c.classes[0].Load(), Informational: c.classes[1].Load(), Success: c.classes[2].Load(),
		Redirect: c.classes[3].Load(), ClientError: c.classes[4].Load(), ServerError: c.classes[5].Load(), Errors: c.errors.Load()}
}

// Responses counts the responses of the requests that went to b (every
// request the gateway recorded with b as its backend).
func (b *Backend) Responses() *ResponseCounter { return b.responses }

// ConfiguredWeight is the weight b ramps up to: Spec.Weight, at least 1.
func (b *Backend) ConfiguredWeight() int { return max(b.Spec.Weight, 1) }

// SlowStartUntil is when b's slow-start ramp ends (zero: no ramp running).
func (b *Backend) SlowStartUntil() time.Time {
	since := b.warmSince.Load()
	if since == 0 {
		return time.Time{}
	}
	end := time.Unix(0, since).Add(b.slowStart)
	if !time.Now().Before(end) {
		return time.Time{}
	}
	return end
}

package hcl

import (
	"fmt"
	"math"
	"math/big"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// Bounds of rate_limit (interface.md).
const (
	// MaxRequestsPerSecond bounds requests_per_second (the gateway's own
	// bound, ratelimit.MaxRequestsPerSecond).
	MaxRequestsPerSecond = 1e9
	// DefaultRateLimitKey is rate_limit.key when absent.
	DefaultRateLimitKey = "client_ip"
)

// RateLimit is a rate_limit block of a listener or an upstream: a token
// bucket per key. Requests over it get 429 rate_limited with Retry-After.
type RateLimit struct {
	// RequestsPerSecond is the refill rate, > 0 and at most 1e9; fractions
	// are allowed (0.5: one request every two seconds). Required.
	RequestsPerSecond float64
	// Burst is the bucket size, 1..2147483647; absent means one second's
	// worth, ceil(requests_per_second) (at least 1).
	Burst int
	// Key is client_ip (default), header:NAME (NAME an RFC 9110 token;
	// requests without the header share one bucket) or route.
	Key string
	// Range is the block's definition range.
	Range hcl2.Range
}

// rawRateLimit is listener.rate_limit and upstream.rate_limit.
type rawRateLimit struct {
	DefRange hcl2.Range `hcl:",def_range"`

	RequestsPerSecond *hcl2.Attribute `hcl:"requests_per_second,optional"`
	Burst             *hcl2.Attribute `hcl:"burst,optional"`
	Key               *hcl2.Attribute `hcl:"key,optional"`
}

func (r *rawRateLimit) defRange() hcl2.Range { return r.DefRange }

// buildRateLimit converts a rate_limit block (nil: none). b is the
// enclosing listener's or upstream's view.
func buildRateLimit(b blk, r *rawRateLimit) *RateLimit {
	if r == nil {
		return nil
	}
	b = b.child("rate_limit", r.DefRange)
	rl := &RateLimit{Range: r.DefRange, Key: DefaultRateLimitKey}
	if r.RequestsPerSecond == nil {
		b.errorf(nil, "requests_per_second", "Missing requests_per_second", "a rate_limit block needs requests_per_second (> 0; remove the block for no limit).")
	} else {
		rl.RequestsPerSecond = b.rate(r.RequestsPerSecond)
	}
	if n, ok := b.integer(r.Burst, 0, 1, maxCount); ok {
		rl.Burst = n
	} else if r.Burst == nil && rl.RequestsPerSecond > 0 {
		rl.Burst = int(min(max(math.Ceil(rl.RequestsPerSecond), 1), maxCount))
	}
	if key, ok := b.strOK(r.Key, DefaultRateLimitKey); ok {
		if why := checkRateLimitKey(key); why != "" {
			b.errorf(r.Key, "", "Invalid rate_limit key", "%s.", why)
		} else {
			rl.Key = key
		}
	}
	return rl
}

// rate reads requests_per_second: a number greater than 0, at most
// MaxRequestsPerSecond (0 on error).
func (b blk) rate(a *hcl2.Attribute) float64 {
	v, ok := b.value(a, cty.Number)
	if !ok {
		return 0
	}
	f := v.AsBigFloat()
	if f.Sign() <= 0 || f.Cmp(big.NewFloat(MaxRequestsPerSecond)) > 0 {
		b.errorf(a, "", "Value out of range", "%s is out of range (greater than 0, at most %.0f).", f.Text('g', 6), float64(MaxRequestsPerSecond))
		return 0
	}
	r, _ := f.Float64()
	return r
}

// checkRateLimitKey validates a rate_limit key: client_ip, route or
// header:NAME (an RFC 9110 token, not Host). It returns a reason for
// messages, or "".
func checkRateLimitKey(s string) string {
	switch s {
	case "client_ip", "route":
		return ""
	}
	name, ok := strings.CutPrefix(s, "header:")
	switch {
	case !ok:
		return fmt.Sprintf("%q is not one of client_ip, header:NAME or route", s)
	case !isToken(name):
		return fmt.Sprintf("%q: header name %q is not a valid token", s, name)
	case fieldKey(name) == "host":
		return fmt.Sprintf("%q: the Host header cannot be a key; use route", s)
	}
	return ""
}

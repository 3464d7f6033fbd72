package hcl

import (
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// ladderRung is a timeout of the upstream's ladder that the request timeout
// bounds, as written by the user (defaults never make the ladder
// inconsistent: a request timeout simply cuts them short): its block, its
// attribute and its value.
type ladderRung struct {
	b blk
	a *hcl2.Attribute
	d time.Duration
}

// buildTimeouts converts upstream.timeouts (nil: DefaultTimeouts) and
// returns the rungs checkLadder compares with the request timeout: connect
// and response_header, when written and valid.
func buildTimeouts(b blk, r *rawTimeouts) (Timeouts, []ladderRung) {
	t := DefaultTimeouts()
	if r == nil {
		return t, nil
	}
	tb := b.child("timeouts", r.DefRange)
	var rungs []ladderRung
	written := func(a *hcl2.Attribute, def, min time.Duration) time.Duration {
		before := tb.errCount()
		d := tb.duration(a, def, min, 0)
		if a != nil && tb.errCount() == before {
			rungs = append(rungs, ladderRung{tb, a, d})
		}
		return d
	}
	t.Connect = written(r.Connect, DefaultConnectTimeout, positive)
	t.ResponseHeader = written(r.ResponseHeader, DefaultResponseHeaderTimeout, positive)
	t.Idle = tb.duration(r.Idle, DefaultIdleTimeout, positive, 0)
	t.BodyIdle = tb.duration(r.BodyIdle, DefaultBodyIdleTimeout, positive, 0)
	t.Request = tb.duration(r.Request, 0, 0, 0)
	return t, rungs
}

// checkLadder reports every rung longer than request, the timeout of the
// whole exchange (0: none, nothing to check): such a timeout could never
// fire, which is not what its author meant.
func checkLadder(request time.Duration, rungs []ladderRung) {
	if request <= 0 {
		return
	}
	for _, r := range rungs {
		if r.d > request {
			r.b.errorf(r.a, "", "Inconsistent timeouts", "%s (%s) must not be longer than the request timeout (%s), which bounds the whole exchange.",
				r.a.Name, fmtDuration(r.d), fmtDuration(request))
		}
	}
}

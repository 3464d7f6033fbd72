package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// requestSummary describes the requests that arrived in a time range.
type requestSummary struct {
	total, withIndex, changed, expired, failed int
	healthService                              int // /v1/health/service/...
	other                                      map[string]int
	watches                                    int // distinct paths
	bytes                                      int64
	statuses                                   map[int]int // by reply status; 0: still blocked
	// withoutIndexAfterFirst counts requests lacking index= on a path that
	// had already been queried (in all records, not only these).
	withoutIndexAfterFirst int
	// Why each request was sent, from the reply to the previous request of
	// the same watch (path): a changed reply, an expired wait, a failure,
	// or none (the watch's first request).
	afterChange, afterExpiry, afterFailure, first int
	// periodicSweep counts the change feed's periodic sweep reads
	// (/v1/catalog/nodes, /v1/catalog/node-services/<node>) sent within a
	// second of a /v1/catalog/services wait expiry: like the re-issue after
	// an expiry, an idle cost (one sweep per wait), not a change's.
	periodicSweep int
}

// sweepAfterExpiry is how soon after a /v1/catalog/services wait expiry a
// sweep read counts as the periodic sweep it triggers.
const sweepAfterExpiry = time.Second

// perChange is the requests not explained by wait expiry per change: what a
// change costs in requests to Consul (the first requests of paths not read
// before, targeted reads included).
func (s requestSummary) perChange(changes int) float64 {
	return float64(s.total-s.afterExpiry-s.periodicSweep) / float64(max(1, changes))
}

// summarize describes the records whose request arrived in [from, to).
func (p *countingProxy) summarize(from, to time.Time) requestSummary {
	p.mu.Lock()
	prev := map[string]*record{}
	s := requestSummary{other: map[string]int{}, statuses: map[int]int{}}
	paths := map[string]bool{}
	var catalogExpired time.Time // the last /v1/catalog/services wait expiry, if no change since
	for _, r := range p.recs {
		if r.path == "/v1/catalog/services" && !r.end.IsZero() && r.status == http.StatusOK {
			if r.changed() {
				catalogExpired = time.Time{}
			} else {
				catalogExpired = r.end
			}
		}
		in := !r.start.Before(from) && r.start.Before(to)
		if in {
			s.total++
			paths[r.path] = true
			s.bytes += r.bytes
			s.statuses[r.status]++
			if r.hasIndex {
				s.withIndex++
			}
			switch {
			case r.end.IsZero():
				// still blocked: neither changed nor expired yet
			case r.status != http.StatusOK:
				s.failed++
			case r.changed():
				s.changed++
			default:
				s.expired++
			}
			if (r.path == "/v1/catalog/nodes" || strings.HasPrefix(r.path, "/v1/catalog/node-services/")) &&
				!catalogExpired.IsZero() && !r.start.Before(catalogExpired) && r.start.Sub(catalogExpired) < sweepAfterExpiry {
				s.periodicSweep++
			}
			if strings.HasPrefix(r.path, "/v1/health/service/") {
				s.healthService++
			} else {
				s.other[r.path]++
			}
			pr := prev[r.path]
			switch {
			case pr == nil:
				s.first++
			case pr.status != http.StatusOK:
				s.afterFailure++
			case pr.changed():
				s.afterChange++
			default:
				s.afterExpiry++
			}
			if pr != nil && !r.hasIndex {
				s.withoutIndexAfterFirst++
			}
		}
		prev[r.path] = r
	}
	p.mu.Unlock()
	s.watches = len(paths)
	return s
}

// firstChange returns the reply time of the first reply for one of paths
// that carried a change (a blocking query that woke up, or a read without
// index=) and arrived at or after t, or the zero time.
func (p *countingProxy) firstChange(t time.Time, paths ...string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var best time.Time
	for _, r := range p.recs {
		if slices.Contains(paths, r.path) && !r.end.IsZero() && !r.end.Before(t) && r.changed() {
			if best.IsZero() || r.end.Before(best) {
				best = r.end
			}
		}
	}
	return best
}

// rate is the request rate over [from, to): the mean, and the most requests
// that arrived within any 1 s.
type rate struct {
	n       int
	span    time.Duration
	busiest int // requests in the busiest 1 s window
}

func (r rate) mean() float64 { return float64(r.n) / max(r.span.Seconds(), 1e-9) }

func (p *countingProxy) rate(from, to time.Time) rate {
	p.mu.Lock()
	var ts []time.Time
	for _, r := range p.recs {
		if !r.start.Before(from) && r.start.Before(to) {
			ts = append(ts, r.start)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	out := rate{n: len(ts), span: to.Sub(from)}
	i := 0
	for j := range ts {
		for ts[j].Sub(ts[i]) >= time.Second {
			i++
		}
		out.busiest = max(out.busiest, j-i+1)
	}
	return out
}

// settled reports whether the agent's requests have come to rest after
// since: no request without index= is in flight or arrived in the last
// quiet, and every blocking query (with index=) whose reply after since
// carried a change has been followed by a later request on its path (the
// watch re-issued it). Requests that a change causes have then all arrived.
func (p *countingProxy) settled(since time.Time, quiet time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	woke := map[string]time.Time{} // path → latest changed reply after since
	last := map[string]time.Time{} // path → latest request start
	for _, r := range p.recs {
		if !r.hasIndex && (r.end.IsZero() || now.Sub(r.start) < quiet) {
			return false
		}
		if r.start.After(last[r.path]) {
			last[r.path] = r.start
		}
		if r.hasIndex && !r.end.IsZero() && r.end.After(since) && r.changed() && r.end.After(woke[r.path]) {
			woke[r.path] = r.end
		}
	}
	for path, t := range woke {
		if last[path].Before(t) {
			return false
		}
	}
	return true
}

// waitSettled waits until settled(since, 250 ms), at most timeout; it
// reports how long that took, or an error.
func (p *countingProxy) waitSettled(since time.Time, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	err := waitUntil(timeout, 25*time.Millisecond, func() bool { return p.settled(since, 250*time.Millisecond) })
	if err != nil {
		return time.Since(t0), fmt.Errorf("requests to Consul still coming: %w", err)
	}
	return time.Since(t0), nil
}

// statusText formats replies by status, e.g. "200: 1,000, 429: 12"; 0 is
// "blocked" (no reply yet) and 502 the proxy's own (Consul unreachable).
func statusText(m map[int]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		name := fmt.Sprint(k)
		if k == 0 {
			name = "blocked"
		}
		parts = append(parts, fmt.Sprintf("%s: %s", name, thousands(m[k])))
	}
	return strings.Join(parts, ", ")
}

// thousands formats n with commas.
func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

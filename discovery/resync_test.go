package discovery

// The resync grace: an empty answer right after an outage or an index reset
// is held back while Consul may be refilling lost state. Scripted with the
// double because a real agent cannot be made to answer empty at a chosen
// moment; TestB02ConsulRestartKeepsLastSet covers the real restart.

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// script returns a double script playing steps, then repeating the last one.
func script(steps ...reply) func(int) reply {
	return func(n int) reply { return steps[min(n, len(steps)-1)] }
}

// snapshotIDs lists the instance IDs of every snapshot emitted.
func snapshotIDs(r *recorder) [][]string {
	var out [][]string
	for _, s := range r.all() {
		out = append(out, instanceIDs(s))
	}
	return out
}

// TestResyncGraceHoldsEmptyAfterOutage: [A B]; 500 No cluster leader; then a
// restarted cluster answers empty twice before A is back. The empty answers
// are never emitted; A is, at once.
func TestResyncGraceHoldsEmptyAfterOutage(t *testing.T) {
	t.Parallel()
	d := newDouble(t, script(
		reply{index: 50, ids: []string{"A", "B"}},
		reply{status: http.StatusInternalServerError, body: "No cluster leader"},
		reply{index: 3},
		reply{index: 4},
		reply{index: 5, ids: []string{"A"}},
		reply{index: 5, ids: []string{"A"}, blockWait: true},
	))
	m, sink := newMetrics(t)
	var logs syncBuffer
	c := d.client(t, func(c *Config) {
		c.Metrics, c.Logger, c.Wait = m, teeLogger(t, &logs), time.Second
		c.MinBackoff, c.MaxBackoff = 10*time.Millisecond, 10*time.Millisecond
	})
	w := startWatch(t, c, Query{Service: "web"})
	w.rec.waitIDs(t, "A")
	if got := snapshotIDs(w.rec); !slices.EqualFunc(got, [][]string{{"A", "B"}, {"A"}}, slices.Equal) {
		t.Fatalf("snapshots %v, want [[A B] [A]]", got)
	}
	if n := sink.counter("impulse.discovery.resync_held;service=web"); n != 1 {
		t.Fatalf("resync_held counted %v, want 1", n)
	}
	if n := sink.counter("impulse.discovery.query.index_resets;service=web"); n != 1 {
		t.Fatalf("index_resets counted %v, want 1 (50 → 3 across the outage)", n)
	}
	if !strings.Contains(logs.String(), "keeping the last known ones during the resync grace") {
		t.Fatalf("no log of the hold:\n%s", logs.String())
	}
}

// TestResyncGraceExpires: after an index reset (no failure) Consul keeps
// answering empty, blocking for the full wait each time. The empty set is
// applied once the grace is over, not a whole wait later: the queries during
// the hold wait at most the grace left.
func TestResyncGraceExpires(t *testing.T) {
	t.Parallel()
	const grace = 400 * time.Millisecond
	d := newDouble(t, script(
		reply{index: 50, ids: []string{"A"}},
		reply{index: 3},
		reply{index: 3, blockWait: true},
	))
	c := d.client(t, func(c *Config) { c.Wait, c.ResyncGrace = 10*time.Second, grace })
	w := startWatch(t, c, Query{Service: "web"})
	w.rec.waitIDs(t)
	reqs := d.requests()
	held := w.rec.all()[1].Time.Sub(reqs[1].at)
	if held < grace || held > grace+2*time.Second {
		t.Fatalf("empty set applied %s after the reset, want about %s", held, grace)
	}
	if q := reqs[2].query; strings.Contains(q, "wait=10000ms") || !strings.Contains(q, "wait=") {
		t.Fatalf("query during the hold %q: want a wait bounded by the grace left", q)
	}
	if got := snapshotIDs(w.rec); len(got) != 2 {
		t.Fatalf("snapshots %v, want [[A] []]", got)
	}
}

// TestResyncGraceOnlyAfterResync: an empty answer with a rising index and no
// outage is a real deregistration, applied at once; with the grace disabled an
// empty answer after a reset is applied at once too.
func TestResyncGraceOnlyAfterResync(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		grace time.Duration
		next  uint64
	}{
		{"RisingIndex", 0, 51},
		{"GraceDisabled", -1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDouble(t, script(
				reply{index: 50, ids: []string{"A"}},
				reply{index: tc.next},
				reply{index: tc.next, blockWait: true},
			))
			m, sink := newMetrics(t)
			c := d.client(t, func(c *Config) { c.Wait, c.ResyncGrace, c.Metrics = 10*time.Second, tc.grace, m })
			w := startWatch(t, c, Query{Service: "web"})
			w.rec.waitIDs(t)
			if held := w.rec.all()[1].Time.Sub(d.requests()[1].at); held > time.Second {
				t.Fatalf("empty set applied %s after the answer, want at once", held)
			}
			if n := sink.counter("impulse.discovery.resync_held;service=web"); n != 0 {
				t.Fatalf("resync_held counted %v, want 0", n)
			}
		})
	}
}

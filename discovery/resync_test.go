package discovery

// The resync grace: an empty answer right after an outage or an index reset
// is held back while Consul may be refilling lost state. Scripted with the
// double because a real agent cannot be made to answer empty at a chosen
// moment; TestB02ConsulRestartKeepsLastSet covers the real restart.

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/test/consultest"
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
	if !containsAll(logs.String(), "keeping them during the resync grace", "kept=2", "resync hold released") {
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

// TestResyncSettledByNonEmptyAnswer: a Consul that comes back from an outage
// with its state (a persistent server) ends the resync at its first answer: a
// deregistration of every instance right after is applied at once.
func TestResyncSettledByNonEmptyAnswer(t *testing.T) {
	t.Parallel()
	d := newDouble(t, script(
		reply{index: 50, ids: []string{"A"}},
		reply{status: http.StatusInternalServerError, body: "No cluster leader"},
		reply{index: 51, ids: []string{"A"}},
		reply{index: 52},
		reply{index: 52, blockWait: true},
	))
	m, sink := newMetrics(t)
	c := d.client(t, func(c *Config) {
		c.Wait, c.Metrics = 10*time.Second, m
		c.MinBackoff, c.MaxBackoff = 10*time.Millisecond, 10*time.Millisecond
	})
	w := startWatch(t, c, Query{Service: "web"})
	w.rec.waitIDs(t)
	if held := w.rec.all()[1].Time.Sub(d.requests()[3].at); held > time.Second {
		t.Fatalf("deregistration applied %s after Consul reported it, want at once", held)
	}
	if n := sink.counter("impulse.discovery.resync_held;service=web"); n != 0 {
		t.Fatalf("resync_held counted %v, want 0", n)
	}
}

// TestWatchFromSeed: a watch taking over from another one (a new client after
// a reload) treats its first answer as a resync against what the old watch
// knew: an empty first answer emits the seed, the first instance ends it; an
// answer equal to the seed is emitted once, marking the watch synced.
func TestWatchFromSeed(t *testing.T) {
	t.Parallel()
	q, err := Query{Service: "web"}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	seed := &Snapshot{Query: q, Index: 40, Instances: instances(q, doubleEntries("A"))}
	start := func(t *testing.T, steps ...reply) (*recorder, *Client) {
		d := newDouble(t, script(steps...))
		c := d.client(t, func(c *Config) { c.Wait = 10 * time.Second })
		rec := &recorder{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.WatchFrom(ctx, Query{Service: "web"}, seed, rec.emit) }()
		t.Cleanup(func() { cancel(); <-done })
		return rec, c
	}
	t.Run("EmptyFirstAnswer", func(t *testing.T) {
		rec, c := start(t, reply{index: 3}, reply{index: 4}, reply{index: 5, ids: []string{"B"}},
			reply{index: 5, ids: []string{"B"}, blockWait: true})
		rec.waitIDs(t, "B")
		if got := snapshotIDs(rec); !slices.EqualFunc(got, [][]string{{"A"}, {"B"}}, slices.Equal) {
			t.Fatalf("snapshots %v, want [[A] [B]]", got)
		}
		if st := c.Status(); !st[0].Synced {
			t.Fatalf("status %+v", st)
		}
	})
	t.Run("SameFirstAnswer", func(t *testing.T) {
		rec, c := start(t, reply{index: 41, ids: []string{"A"}}, reply{index: 41, ids: []string{"A"}, blockWait: true})
		rec.waitIDs(t, "A")
		waitFor(t, "the second query", func() bool { return c.Status()[0].LastIndex == 41 })
		if n := rec.count(); n != 1 || !c.Status()[0].Synced {
			t.Fatalf("%d snapshots, status %+v", n, c.Status())
		}
	})
}

// TestCatalogResyncKeepsMissingServices (real agent): after a restart that
// lost the catalog, services come back one registration at a time. A service
// missing from the answers is kept (its routes would otherwise answer 404):
// until it is back, logged as the hold's release, or for the whole grace,
// then dropped if it is still missing.
func TestCatalogResyncKeepsMissingServices(t *testing.T) {
	t.Parallel()
	const grace = 3 * time.Second
	a := consultest.Start(t)
	m, sink := newMetrics(t)
	var logs syncBuffer
	c := newTestClient(t, a.Addr(), func(cfg *Config) {
		cfg.Metrics, cfg.ResyncGrace, cfg.Logger = m, grace, teeLogger(t, &logs)
		cfg.MinBackoff, cfg.MaxBackoff = 100*time.Millisecond, 500*time.Millisecond
	})
	shop := map[string][]string{"shop": {"impulse.route=/shop"}}
	both := map[string][]string{"shop": {"impulse.route=/shop"}, "cart": {"impulse.route=/cart"}}
	a.RegisterTTL(t, "shop-1", "shop", "10.0.0.1", 80, shop["shop"], nil)
	a.RegisterTTL(t, "cart-1", "cart", "10.0.0.2", 80, both["cart"], nil)
	r := startCatalogWatch(t, c, CatalogQuery{TagPrefix: "impulse"})
	r.wait(t, both)
	restart := func() time.Time {
		a.Stop()
		waitFor(t, "a failed catalog query", func() bool { return c.Status()[0].LastError != "" })
		a.Restart()
		waitFor(t, "a successful query to the restarted agent", func() bool { return c.Status()[0].LastError == "" })
		return time.Now()
	}

	// Both come back within the grace: nothing is ever dropped.
	restart()
	a.RegisterTTL(t, "shop-1", "shop", "10.0.0.1", 80, shop["shop"], nil)
	a.RegisterTTL(t, "cart-1", "cart", "10.0.0.2", 80, both["cart"], nil)
	waitFor(t, "the hold's release", func() bool { return strings.Contains(logs.String(), "resync hold released") })
	for _, s := range r.all() {
		if len(s.Services) != 2 {
			t.Fatalf("a snapshot lacks a service: %v", s.Services)
		}
	}

	// cart does not come back: dropped when the grace ends.
	before := len(r.all())
	back := restart()
	a.RegisterTTL(t, "shop-1", "shop", "10.0.0.1", 80, shop["shop"], nil)
	last := r.wait(t, shop)
	if d := last.Time.Sub(back); d < grace-500*time.Millisecond {
		t.Fatalf("cart dropped %s after the restart, within the %s grace", d, grace)
	}
	for _, s := range r.all()[before:] {
		if _, ok := s.Services["shop"]; !ok {
			t.Fatalf("shop missing from a snapshot after the restart: %v", s.Services)
		}
	}
	if n := sink.counter("impulse.discovery.resync_held;service=" + CatalogEndpoint); n != 2 {
		t.Fatalf("resync_held counted %v, want 2", n)
	}
	a.RegisterTTL(t, "cart-1", "cart", "10.0.0.2", 80, both["cart"], nil)
	r.wait(t, both)
}

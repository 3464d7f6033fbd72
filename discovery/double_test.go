package discovery

// A scripted Consul double, ONLY for what a real agent cannot be made to do on
// demand: an index that goes backwards or is 0, "500 No cluster leader", and a
// reply held past the client timeout.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// reply is one scripted answer of the double.
type reply struct {
	index  uint64
	status int      // 0 means 200
	body   string   // error body when status is set
	ids    []string // passing instances of "web" on node "n1"
	hold   time.Duration
	// blockWait holds the reply for the query's wait parameter, like a
	// blocking query on which nothing changes.
	blockWait bool
	// block holds the request until the client gives up.
	block bool
}

// request is what the double saw.
type request struct {
	query  string // the raw query string
	index  uint64 // the index parameter; absent counts as 0
	at     time.Time
	abortT time.Time // when the client gave up on a blocked request
}

type double struct {
	srv    *httptest.Server
	script func(n int) reply // n counts requests from 0

	mu   sync.Mutex
	reqs []request
}

func newDouble(t testing.TB, script func(n int) reply) *double {
	d := &double{script: script}
	d.srv = httptest.NewServer(http.HandlerFunc(d.serve))
	t.Cleanup(d.srv.Close)
	return d
}

func (d *double) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/health/service/web" {
		http.NotFound(w, r)
		return
	}
	idx, _ := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	d.mu.Lock()
	n := len(d.reqs)
	d.reqs = append(d.reqs, request{query: r.URL.RawQuery, index: idx, at: time.Now()})
	d.mu.Unlock()
	rep := d.script(n)
	if rep.block {
		<-r.Context().Done()
		d.mu.Lock()
		d.reqs[n].abortT = time.Now()
		d.mu.Unlock()
		return
	}
	if rep.blockWait {
		rep.hold, _ = time.ParseDuration(r.URL.Query().Get("wait"))
	}
	if rep.hold > 0 {
		select {
		case <-time.After(rep.hold):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("X-Consul-Index", strconv.FormatUint(rep.index, 10))
	w.Header().Set("X-Consul-LastContact", "42")
	if rep.status != 0 {
		http.Error(w, rep.body, rep.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doubleEntries(rep.ids...))
}

// doubleEntries are the health entries the double answers for ids.
func doubleEntries(ids ...string) []*api.ServiceEntry {
	entries := make([]*api.ServiceEntry, 0, len(ids))
	for _, id := range ids {
		entries = append(entries, &api.ServiceEntry{
			Node:    &api.Node{Node: "n1", Address: "10.0.0.1"},
			Service: &api.AgentService{ID: id, Service: "web", Port: 80},
			Checks:  api.HealthChecks{{Node: "n1", CheckID: "serfHealth", Status: api.HealthPassing}},
		})
	}
	return entries
}

func (d *double) requests() []request {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]request(nil), d.reqs...)
}

func (d *double) client(t testing.TB, mod ...func(*Config)) *Client {
	return newTestClient(t, d.srv.URL, mod...)
}

// indexes returns the index parameters of the first n requests.
func (d *double) indexes(n int) []uint64 {
	var out []uint64
	for _, r := range d.requests()[:n] {
		out = append(out, r.index)
	}
	return out
}

// TestB01IndexGoesBackwards: 5000 [A]; 4200 [A,B] → the next query is a full
// read (index 0: consul/api omits the parameter); 4300 [A,B]; 4301 [B].
func TestB01IndexGoesBackwards(t *testing.T) {
	t.Parallel()
	steps := []reply{{index: 5000, ids: []string{"A"}}, {index: 4200, ids: []string{"A", "B"}},
		{index: 4300, ids: []string{"A", "B"}}, {index: 4301, ids: []string{"B"}}}
	d := newDouble(t, func(n int) reply {
		if n < len(steps) {
			return steps[n]
		}
		return reply{block: true}
	})
	m, sink := newMetrics(t)
	w := startWatch(t, d.client(t, func(c *Config) { c.Metrics = m }), Query{Service: "web"})
	w.rec.waitIDs(t, "B")
	waitFor(t, "the fifth request", func() bool { return len(d.requests()) >= 5 })

	got := w.rec.all()
	want := []struct {
		index uint64
		ids   []string
	}{{5000, []string{"A"}}, {4200, []string{"A", "B"}}, {4301, []string{"B"}}}
	if len(got) != len(want) {
		t.Fatalf("%d snapshots, want %d: %+v", len(got), len(want), got)
	}
	for i, wnt := range want {
		if got[i].Index != wnt.index || !slices.Equal(instanceIDs(got[i]), wnt.ids) {
			t.Fatalf("snapshot %d: index %d %v, want %d %v", i, got[i].Index, instanceIDs(got[i]), wnt.index, wnt.ids)
		}
	}
	if idx := d.indexes(5); !slices.Equal(idx, []uint64{0, 5000, 0, 4300, 4301}) {
		t.Fatalf("request indexes %v, want [0 5000 0 4300 4301]", idx)
	}
	if n := sink.counter("impulse.discovery.query.index_resets;service=web"); n != 1 {
		t.Fatalf("index resets counted %v, want 1", n)
	}
}

// TestB01IndexZero: a Consul that answers every query at once with index 0.
// The next query uses index 1, and the token bucket (defaults) keeps the
// rate bounded below 5 requests per second; nothing changes, nothing is
// emitted twice.
func TestB01IndexZero(t *testing.T) {
	t.Parallel()
	d := newDouble(t, func(int) reply { return reply{index: 0, ids: []string{"A"}} })
	w := startWatch(t, d.client(t, func(c *Config) { c.Rate, c.Burst = 0, 0 }), Query{Service: "web"})
	waitFor(t, "six requests", func() bool { return len(d.requests()) >= 6 })
	reqs := d.requests()
	for i, r := range reqs[1:] {
		if r.index < 1 {
			t.Fatalf("request %d carried index %d, want >= 1", i+1, r.index)
		}
	}
	elapsed := reqs[5].at.Sub(reqs[0].at)
	if rate := 5 / elapsed.Seconds(); rate >= 5 {
		t.Fatalf("6 requests in %s: %.1f requests/s, want < 5", elapsed, rate)
	}
	if n := w.rec.count(); n != 1 {
		t.Fatalf("%d snapshots for an unchanged set, want 1", n)
	}
}

// TestB02NoClusterLeaderKeepsLastSet: 500 "No cluster leader" for a while is
// an error, never "zero instances"; retries back off; the watch resumes.
func TestB02NoClusterLeaderKeepsLastSet(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var outageEnd time.Time
	d := newDouble(t, func(n int) reply {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case n == 0:
			return reply{index: 10, ids: []string{"A", "B"}}
		case n == 1:
			outageEnd = time.Now().Add(1500 * time.Millisecond)
			fallthrough
		case time.Now().Before(outageEnd):
			return reply{status: http.StatusInternalServerError, body: "No cluster leader"}
		default:
			return reply{index: 12, ids: []string{"A"}, hold: 50 * time.Millisecond}
		}
	})
	m, sink := newMetrics(t)
	var logs syncBuffer
	c := d.client(t, func(c *Config) {
		c.Metrics, c.Logger = m, teeLogger(t, &logs)
		c.MinBackoff, c.MaxBackoff = 0, 0 // defaults 250ms..30s
	})
	w := startWatch(t, c, Query{Service: "web"})
	w.rec.waitIDs(t, "A")

	got := w.rec.all()
	if len(got) != 2 || !slices.Equal(instanceIDs(got[0]), []string{"A", "B"}) {
		t.Fatalf("snapshots %+v, want [A B] then [A]", got)
	}
	errs := sink.counter(errorsMetric + "http_500")
	// 1.5 s of outage with delays ≥ 125, 250, 500, 1000 ms: at most 4 retries.
	if errs < 2 || errs > 5 {
		t.Fatalf("%v errors counted during a 1.5 s outage, want 2..5 (backoff)", errs)
	}
	if !containsAll(logs.String(), "endpoint=/v1/health/service/web", "status=500", "No cluster leader") {
		t.Fatalf("log lacks endpoint/status/body:\n%s", logs.String())
	}
	if sink.sampleCount("impulse.discovery.query.duration;service=web;outcome=ok") < 2 ||
		sink.sampleCount("impulse.discovery.query.duration;service=web;outcome=error") < 2 {
		t.Fatal("query durations not recorded")
	}
	if ts := sink.gauge("impulse.discovery.query.last_success;service=web"); time.Since(time.Unix(int64(ts), 0)) > time.Minute {
		t.Fatalf("last-success gauge %v", ts)
	}
	if n := sink.gauge("impulse.discovery.instances;service=web"); n != 1 {
		t.Fatalf("instances gauge %v, want 1", n)
	}
}

// TestB08BlockingWaitVsClientTimeout: a Consul that holds each blocking
// query for wait + wait/16 causes no client timeout.
func TestB08BlockingWaitVsClientTimeout(t *testing.T) {
	t.Parallel()
	const wait = time.Second
	d := newDouble(t, func(n int) reply {
		if n == 0 {
			return reply{index: 7, ids: []string{"A"}}
		}
		return reply{index: 7, ids: []string{"A"}, hold: wait + wait/16}
	})
	m, sink := newMetrics(t)
	c := d.client(t, func(c *Config) { c.Wait, c.Metrics = wait, m })
	w := startWatch(t, c, Query{Service: "web"})
	waitFor(t, "two full blocking waits", func() bool { return len(d.requests()) >= 4 })
	if n := errorCount(sink); n != 0 {
		t.Fatalf("%v errors while Consul followed the spec: %v", n, sink.counterNames())
	}
	if n := w.rec.count(); n != 1 {
		t.Fatalf("%d snapshots, want 1", n)
	}
	if st := c.Status(); st[0].LastError != "" {
		t.Fatalf("status %+v", st)
	}
}

// TestB08SlowConsulTimesOut: a Consul that never answers is abandoned after
// RequestTimeout(wait) (margin shortened to 300 ms here), counted as a timeout
// and retried; the last set stays. Not parallel: it changes timeoutMargin.
func TestB08SlowConsulTimesOut(t *testing.T) {
	defer func(m time.Duration) { timeoutMargin = m }(timeoutMargin)
	timeoutMargin = 300 * time.Millisecond
	const wait = time.Second
	d := newDouble(t, func(n int) reply {
		if n == 0 {
			return reply{index: 7, ids: []string{"A"}}
		}
		return reply{block: true}
	})
	m, sink := newMetrics(t)
	c := d.client(t, func(c *Config) { c.Wait, c.Metrics = wait, m })
	w := startWatch(t, c, Query{Service: "web"})
	waitFor(t, "a timeout", func() bool { return sink.counter(errorsMetric+"timeout") >= 1 })
	w.stop(t)
	waitFor(t, "the double to see the abort", func() bool { return !d.requests()[1].abortT.IsZero() })
	r := d.requests()[1]
	held := r.abortT.Sub(r.at)
	if lo, hi := wait+wait/16+timeoutMargin, wait+wait/16+timeoutMargin+time.Second; held < lo-20*time.Millisecond || held > hi {
		t.Fatalf("client gave up after %s, want about %s", held, lo)
	}
	if s, _ := w.rec.last(); w.rec.count() != 1 || len(s.Instances) != 1 {
		t.Fatalf("snapshots %+v", w.rec.all())
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// TestEnterpriseScopesAndStaleAreSent: namespace and partition (Consul
// Enterprise) and stale reads are passed through as query parameters (a
// Community Edition agent rejects ns/partition, hence the double), and the
// X-Consul-LastContact of a stale reply is exported.
func TestEnterpriseScopesAndStaleAreSent(t *testing.T) {
	d := newDouble(t, func(n int) reply { return reply{index: 10, ids: []string{"a"}, hold: 50 * time.Millisecond} })
	m, sink := newMetrics(t)
	c := d.client(t, func(cfg *Config) { cfg.Stale, cfg.Metrics = true, m })
	w := startWatch(t, c, Query{Service: "web", Namespace: "team-a", Partition: "eu", Datacenter: "dc2"})
	w.rec.waitIDs(t, "a")
	q := d.requests()[0].query
	for _, want := range []string{"ns=team-a", "partition=eu", "dc=dc2", "stale"} {
		if !strings.Contains(q, want) {
			t.Errorf("query %q lacks %s", q, want)
		}
	}
	if got := sink.gauge("impulse.discovery.query.last_contact;service=web"); got != 42 {
		t.Errorf("last_contact gauge = %v, want 42 (ms)", got)
	}
}

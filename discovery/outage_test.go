package discovery

// Outages, ACL denials and cancellation against a real Consul agent.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/impulse-agent/impulse-agent/test/consultest"
	"go.uber.org/goleak"
)

const errorsMetric = "impulse.discovery.query.errors;service=web;reason="

// TestB02ConsulRestartKeepsLastSet stops the agent (a real outage), restarts it
// (dev mode: state lost, index restarts low) and re-registers the instances.
// Nothing is emitted while Consul is away, errors are logged and counted, the
// retries back off, and the watch resumes with a reset index, never emitting
// the empty set the fresh agent reports before the re-registration.
func TestB02ConsulRestartKeepsLastSet(t *testing.T) {
	t.Parallel()
	a := consultest.Start(t)
	m, sink := newMetrics(t)
	var logs syncBuffer
	const secret = "6d1f0b7e-secret-token-never-logged"
	c := newTestClient(t, a.Addr(), func(cfg *Config) {
		cfg.Metrics, cfg.Logger, cfg.Token = m, teeLogger(t, &logs), secret
		cfg.MinBackoff, cfg.MaxBackoff = 100*time.Millisecond, 2*time.Second
	})
	a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, nil, nil)
	checkB := a.RegisterTTL(t, "web-b", "web", "10.0.0.2", 80, nil, nil)
	w := startWatch(t, c, Query{Service: "web"})
	w.rec.waitIDs(t, "web-a", "web-b")
	// Raise the service's index well above what a fresh dev agent reaches.
	for range 10 {
		a.SetCheck(t, checkB, api.HealthCritical)
		w.rec.waitIDs(t, "web-a")
		a.SetCheck(t, checkB, api.HealthPassing)
		w.rec.waitIDs(t, "web-a", "web-b")
	}
	before, _ := w.rec.last()
	emitted := w.rec.count()

	a.Stop()
	outage := time.Now()
	waitFor(t, "three failed queries", func() bool { return errorCount(sink) >= 3 })
	// Backoff, not a hot loop: with delays of at least 50, 100, 200, 400 ms …
	// (equal jitter of 100 ms doubling to 2 s) a hot loop would be far above.
	elapsed := time.Since(outage)
	if n := errorCount(sink); n > 3+float64(elapsed/(50*time.Millisecond)) {
		t.Fatalf("%v errors in %s: retries do not back off", n, elapsed)
	}
	st := c.Status()
	if len(st) != 1 || !strings.Contains(st[0].LastError, "/v1/health/service/web") || !st[0].Synced {
		t.Fatalf("status during outage: %+v", st)
	}
	if sink.counter(errorsMetric+"transport") < 1 {
		t.Fatalf("no transport error counted: %v", sink.counterNames())
	}
	a.Restart()
	if got := w.rec.count(); got != emitted {
		t.Fatalf("%d snapshots emitted while Consul was down: %+v", got-emitted, w.rec.all()[emitted:])
	}
	// The fresh agent answers, with no instance of web yet: held back.
	waitFor(t, "a successful query to the restarted agent", func() bool {
		st := c.Status()
		return len(st) == 1 && st[0].LastError == "" && st[0].LastIndex < before.Index
	})
	if got := w.rec.count(); got != emitted {
		t.Fatalf("the restarted agent's empty answer was emitted: %+v", w.rec.all()[emitted:])
	}
	if n := sink.counter("impulse.discovery.resync_held;service=web"); n != 1 {
		t.Fatalf("resync_held counted %v, want 1", n)
	}

	a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, nil, nil)
	a.RegisterTTL(t, "web-b", "web", "10.0.0.2", 80, nil, nil)
	a.RegisterTTL(t, "web-c", "web", "10.0.0.3", 80, nil, nil)
	after := w.rec.waitIDs(t, "web-a", "web-b", "web-c")
	if after.Index >= before.Index {
		t.Fatalf("index after restart %d not below %d: no reset observed", after.Index, before.Index)
	}
	if st := c.Status(); st[0].LastError != "" || st[0].LastIndex < after.Index {
		t.Fatalf("status after recovery: %+v", st)
	}
	// Between Restart (leader elected) and the re-registration a dev agent
	// reports zero instances: the resync grace holds that answer back, so
	// the set never empties; a partial set (web-a before web-b) may show.
	for _, s := range w.rec.all()[emitted:] {
		t.Logf("after restart: index %d %v", s.Index, instanceIDs(s))
		if len(s.Instances) == 0 {
			t.Fatalf("an empty set was emitted after the restart (index %d)", s.Index)
		}
	}
	out := logs.String()
	if !strings.Contains(out, "endpoint=/v1/health/service/web") || !strings.Contains(out, "reason=transport") {
		t.Fatalf("error log lacks endpoint or reason:\n%s", out)
	}
	if strings.Contains(out, secret) {
		t.Fatal("the ACL token appears in the logs")
	}
}

func errorCount(s *memSink) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n float64
	for k, v := range s.counters {
		if strings.HasPrefix(k, "impulse.discovery.query.errors;") {
			n += v
		}
	}
	return n
}

// TestB07ACLDeniedIsAnErrorNotAnEmptyService runs Consul with ACLs on and
// default deny.
func TestB07ACLDeniedIsAnErrorNotAnEmptyService(t *testing.T) {
	t.Parallel()
	const mgmt = "0b8e2f63-4c1d-4a57-9e2b-7d6c5a4f3e21"
	a := consultest.Start(t, consultest.WithACLs(mgmt))
	good := a.CreateToken(t, "web-read", `service "web" { policy = "read" }
node_prefix "" { policy = "read" }`)
	nodesOnly := a.CreateToken(t, "nodes-only", `node_prefix "" { policy = "read" }`)
	a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, nil, nil)

	coldStart := func(t *testing.T, tok, reason string) {
		m, sink := newMetrics(t)
		c := newTestClient(t, a.Addr(), func(cfg *Config) { cfg.Token, cfg.Metrics = tok, m })
		w := startWatch(t, c, Query{Service: "web"})
		waitFor(t, reason+" error", func() bool { return sink.counter(errorsMetric+reason) >= 2 })
		if n := w.rec.count(); n != 0 {
			t.Fatalf("denied watch emitted %d snapshots: %+v", n, w.rec.all())
		}
		if st := c.Status(); len(st) != 1 || st[0].Synced || !strings.Contains(st[0].LastError, "/v1/health/service/web") {
			t.Fatalf("status %+v", st)
		}
		t.Logf("status: %s", c.Status()[0].LastError)
	}
	t.Run("ColdStartFilteredByACLs", func(t *testing.T) { coldStart(t, nodesOnly, reasonACLFiltered) })
	t.Run("ColdStartUnknownToken", func(t *testing.T) { coldStart(t, "4e6f2d8a-0000-4000-8000-000000000000", "http_403") })

	t.Run("TokenRevokedKeepsLastSet", func(t *testing.T) {
		m, sink := newMetrics(t)
		var logs syncBuffer
		c := newTestClient(t, a.Addr(), func(cfg *Config) {
			cfg.Token, cfg.Metrics, cfg.Logger = good, m, teeLogger(t, &logs)
			cfg.Wait = time.Second // the in-flight blocking query ends soon after the revocation
		})
		w := startWatch(t, c, Query{Service: "web"})
		w.rec.waitIDs(t, "web-a")
		// Revoke only once a blocking query has completed: Consul 1.14 serves
		// blocking health queries from a streaming subscription, and one being
		// set up while its token is deleted can go on answering with it (seen
		// for over 20 s under load). The watch's handling of the 403 is what
		// this test is about, not that race.
		synced := c.Status()[0].LastSuccess
		waitFor(t, "a completed blocking query", func() bool { return c.Status()[0].LastSuccess.After(synced) })
		a.RevokeToken(t, good)
		waitFor(t, "403 after revocation", func() bool { return sink.counter(errorsMetric+"http_403") >= 1 })
		a.Deregister(t, "web-a") // Consul would now report no instance, but we may not read it
		waitFor(t, "more 403s", func() bool { return sink.counter(errorsMetric+"http_403") >= 3 })
		if s, _ := w.rec.last(); w.rec.count() != 1 || len(s.Instances) != 1 {
			t.Fatalf("snapshots after revocation: %+v", w.rec.all())
		}
		st := c.Status()
		if len(st) != 1 || !strings.Contains(st[0].LastError, "GET /v1/health/service/web: status 403") {
			t.Fatalf("status %+v", st)
		}
		out := logs.String()
		if !strings.Contains(out, "status=403") || !strings.Contains(out, "endpoint=/v1/health/service/web") {
			t.Fatalf("log lacks endpoint/status:\n%s", out)
		}
		if strings.Contains(out, good) {
			t.Fatal("the ACL token appears in the logs")
		}
		a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, nil, nil)
	})
}

// TestWatchCancelStopsPromptly cancels a watch parked in a 5-minute blocking
// query: it returns context.Canceled at once and leaves no goroutine behind.
func TestWatchCancelStopsPromptly(t *testing.T) { bothModes(t, testWatchCancelStopsPromptly) }

func testWatchCancelStopsPromptly(t *testing.T, mode func(*Config)) {
	a := consultest.Start(t) // not parallel: goroutine accounting must be quiet
	a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, nil, nil)
	ignore := goleak.IgnoreCurrent()
	cfg := Config{Address: a.Addr()} // default 5m wait
	mode(&cfg)
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec := &recorder{}
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, Query{Service: "web"}, rec.emit) }()
	rec.waitIDs(t, "web-a")
	waitFor(t, "a blocking query in flight", func() bool {
		st := c.Status()
		return len(st) == 1 && st[0].LastIndex > 0
	})

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Watch returned %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Watch still running 2s after cancel")
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Watch took %s to return after cancel", d)
	}
	t.Logf("returned %s after cancel", time.Since(start))
	c.Close()
	goleak.VerifyNone(t, ignore) // retries with backoff for a bounded time
}

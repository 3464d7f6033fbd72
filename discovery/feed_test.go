package discovery

// The change feed (Config.ChangeFeed) against a real Consul dev agent. The
// behaviour shared with per-service blocking queries runs in both modes
// (bothModes, in real_test.go and outage_test.go); these tests cover what
// only the feed does.

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// feedMode turns the change feed on.
func feedMode(cfg *Config) { cfg.ChangeFeed = true }

// bothModes runs test with per-service blocking queries and with the
// change feed.
func bothModes(t *testing.T, test func(t *testing.T, mode func(*Config))) {
	t.Run("blocking", func(t *testing.T) { test(t, func(*Config) {}) })
	t.Run("feed", func(t *testing.T) { test(t, feedMode) })
}

// TestFeedRegistrationChangesWithoutFailingChecks: changes that leave no
// failing check behind, so only the catalog feed and its sweep can see
// them, still reach the watch.
func TestFeedRegistrationChangesWithoutFailingChecks(t *testing.T) {
	t.Parallel()
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr(), feedMode, func(cfg *Config) { cfg.Wait = 2 * time.Second })
	passing := func(id, addr string, port int, meta map[string]string) {
		a.Register(t, api.AgentServiceRegistration{ID: id, Name: "web", Address: addr, Port: port, Meta: meta,
			Check: &api.AgentServiceCheck{CheckID: id + ":ttl", TTL: "10m", Status: api.HealthPassing}})
	}
	passing("web-a", "10.0.0.1", 80, nil)
	w := startWatch(t, c, Query{Service: "web"})
	w.rec.waitIDs(t, "web-a")

	passing("web-b", "10.0.0.2", 80, nil) // registered passing: no failing check ever
	w.rec.waitIDs(t, "web-a", "web-b")
	a.Register(t, api.AgentServiceRegistration{ID: "web-c", Name: "web", Address: "10.0.0.3", Port: 80}) // no check
	w.rec.waitIDs(t, "web-a", "web-b", "web-c")

	passing("web-b", "10.0.0.2", 80, map[string]string{"rev": "2"}) // meta only: the check is not rewritten
	waitFor(t, "the meta change", func() bool {
		s, ok := w.rec.last()
		return ok && len(s.Instances) == 3 && s.Instances[1].Meta["rev"] == "2"
	})
	a.Deregister(t, "web-c")
	w.rec.waitIDs(t, "web-a", "web-b")
	a.Deregister(t, "web-b") // a passing instance leaves
	w.rec.waitIDs(t, "web-a")

	// Another node, through the catalog API, with only passing checks.
	a.RegisterExternal(t, api.CatalogRegistration{Node: "node-x", Address: "10.1.0.1",
		Service: &api.AgentService{ID: "web-x", Service: "web", Port: 80},
		Checks:  api.HealthChecks{{Node: "node-x", CheckID: "web-x:http", Name: "http", Status: api.HealthPassing, ServiceID: "web-x"}}})
	w.rec.waitIDs(t, "web-a", "web-x")
	// The node's address changes: no service or check is written, only the
	// node; the periodic sweep (every wait, 2 s here) finds it.
	a.RegisterExternal(t, api.CatalogRegistration{Node: "node-x", Address: "10.1.0.2"})
	waitFor(t, "the node address change", func() bool {
		s, ok := w.rec.last()
		return ok && len(s.Instances) == 2 && s.Instances[1].Address == "10.1.0.2"
	})
	// A failing node check on node-x takes web-x out.
	a.RegisterExternal(t, api.CatalogRegistration{Node: "node-x", Address: "10.1.0.2",
		Checks: api.HealthChecks{{Node: "node-x", CheckID: "serfHealth", Name: "Serf Health Status", Status: api.HealthCritical}}})
	w.rec.waitIDs(t, "web-a")
}

// tcpCounter forwards TCP connections to target and records how many are
// open at once.
type tcpCounter struct {
	ln          net.Listener
	open, peak  atomic.Int64
	accepted    atomic.Int64
	wg          sync.WaitGroup
	mu          sync.Mutex
	conns       []net.Conn
	target      string
	closeAccept chan struct{}
}

func newTCPCounter(t *testing.T, target string) *tcpCounter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpCounter{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			n := p.open.Add(1)
			for {
				peak := p.peak.Load()
				if n <= peak || p.peak.CompareAndSwap(peak, n) {
					break
				}
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				p.open.Add(-1)
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			var done sync.WaitGroup
			done.Add(2)
			pipe := func(dst, src net.Conn) {
				defer done.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); done.Wait(); p.open.Add(-1) }()
			go pipe(in, out)
			go pipe(out, in)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *tcpCounter) addr() string { return p.ln.Addr().String() }

// TestFeedHoldsFewConnections: 300 watched services on a Consul agent with
// its default limits (http_max_conns_per_client = 200, which one blocking
// query per service exceeds) all sync through at most 8 connections, and
// follow check flips.
func TestFeedHoldsFewConnections(t *testing.T) {
	t.Parallel()
	const services = 300
	a := consultest.Start(t)
	checks := make([]string, services)
	for i := range services {
		checks[i] = a.RegisterTTL(t, fmt.Sprintf("svc%d-a", i), fmt.Sprintf("svc%d", i), "10.0.0.1", 80, nil, nil)
	}
	p := newTCPCounter(t, a.Addr())
	c := newTestClient(t, p.addr(), feedMode)
	ws := make([]*running, services)
	for i := range services {
		ws[i] = startWatch(t, c, Query{Service: fmt.Sprintf("svc%d", i)})
	}
	for i := range services {
		ws[i].rec.waitIDs(t, fmt.Sprintf("svc%d-a", i))
	}
	for _, i := range []int{7, 150, 299} {
		a.SetCheck(t, checks[i], api.HealthCritical)
		ws[i].rec.waitIDs(t)
		a.SetCheck(t, checks[i], api.HealthPassing)
		ws[i].rec.waitIDs(t, fmt.Sprintf("svc%d-a", i))
	}
	for _, st := range c.Status() {
		if !st.Synced || st.LastError != "" {
			t.Fatalf("watch %s: synced %v, last error %q", st.Query.Service, st.Synced, st.LastError)
		}
	}
	t.Logf("connections to Consul: peak %d open at once, %d accepted in all", p.peak.Load(), p.accepted.Load())
	if peak := p.peak.Load(); peak > 8 {
		t.Fatalf("%d connections to Consul open at once, want at most 8", peak)
	}
}

// TestFeedOutageSendsNothingAndCatchesUp: while Consul is down the watches
// keep their set and send no query of their own (only the two feed queries
// retry, with backoff); their status carries the feed's error. After a
// restart (a dev agent: state lost, index lower) the set is held through the
// resync grace and follows the re-registration.
func TestFeedOutageSendsNothingAndCatchesUp(t *testing.T) {
	t.Parallel()
	a := consultest.Start(t)
	m, sink := newMetrics(t)
	c := newTestClient(t, a.Addr(), feedMode, func(cfg *Config) {
		cfg.Metrics = m
		cfg.MinBackoff, cfg.MaxBackoff = 100*time.Millisecond, time.Second
	})
	a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, nil, nil)
	a.RegisterTTL(t, "api-a", "api", "10.0.0.2", 80, nil, nil)
	web := startWatch(t, c, Query{Service: "web"})
	apiW := startWatch(t, c, Query{Service: "api"})
	web.rec.waitIDs(t, "web-a")
	apiW.rec.waitIDs(t, "api-a")
	emitted := web.rec.count()

	a.Stop()
	waitFor(t, "feed errors", func() bool {
		return sink.counter("impulse.discovery.query.errors;service=feed:/v1/health/state/critical;reason=transport") >= 3
	})
	for _, st := range c.Status() {
		if !strings.Contains(st.LastError, "change feed") || !strings.Contains(st.LastError, "/v1/health/state/") && !strings.Contains(st.LastError, "/v1/catalog/services") {
			t.Fatalf("status during the outage: %+v", st)
		}
	}
	if fs := c.Feeds(); len(fs) != 3 || fs[0].Status.LastError == "" || fs[0].Services != 2 ||
		fs[0].Endpoint != "/v1/health/state/critical" || fs[1].Endpoint != "/v1/health/state/warning" || fs[2].Endpoint != "/v1/catalog/services" {
		t.Fatalf("feeds during the outage: %+v", fs)
	}
	if n := errorCount(sink) - sink.counter("impulse.discovery.query.errors;service=feed:/v1/health/state/critical;reason=transport") -
		sink.counter("impulse.discovery.query.errors;service=feed:/v1/health/state/warning;reason=transport") -
		sink.counter("impulse.discovery.query.errors;service=feed:/v1/catalog/services;reason=transport"); n != 0 {
		t.Fatalf("%v errors outside the feed queries during the outage: %v", n, sink.counterNames())
	}
	a.Restart()
	a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, nil, nil)
	a.RegisterTTL(t, "web-b", "web", "10.0.0.3", 80, nil, nil)
	a.RegisterTTL(t, "api-a", "api", "10.0.0.2", 80, nil, nil)
	web.rec.waitIDs(t, "web-a", "web-b")
	waitFor(t, "statuses clear", func() bool {
		for _, st := range c.Status() {
			if st.LastError != "" {
				return false
			}
		}
		return true
	})
	for _, s := range web.rec.all()[emitted:] {
		if len(s.Instances) == 0 {
			t.Fatalf("an empty set was emitted after the restart: %+v", web.rec.all())
		}
	}
}

// TestFeedConsulConnectionLimit: a Consul agent whose
// http_max_conns_per_client leaves fewer connections than the feed may use
// answers the extra ones 429 Too Many Requests. The reads that get it back
// off and retry; every watch syncs, with a bounded number of 429s.
func TestFeedConsulConnectionLimit(t *testing.T) {
	t.Parallel()
	const services = 60
	a := consultest.Start(t, consultest.WithConfig("limits {\n  http_max_conns_per_client = 5\n}\n"))
	for i := range services {
		a.RegisterTTL(t, fmt.Sprintf("svc%d-a", i), fmt.Sprintf("svc%d", i), "10.0.0.1", 80, nil, nil)
	}
	m, sink := newMetrics(t)
	c := newTestClient(t, a.Addr(), feedMode, func(cfg *Config) { cfg.Metrics = m })
	ws := make([]*running, services)
	for i := range services {
		ws[i] = startWatch(t, c, Query{Service: fmt.Sprintf("svc%d", i)})
	}
	for i := range services {
		ws[i].rec.waitIDs(t, fmt.Sprintf("svc%d-a", i))
	}
	var n429 float64
	for _, name := range sink.counterNames() {
		if strings.HasSuffix(name, ";reason=http_429") {
			n429 += sink.counter(name)
		}
	}
	t.Logf("429 answers: %v for %d services", n429, services)
	if n429 > 10*services {
		t.Fatalf("%v answers 429 for %d services: the reads do not back off", n429, services)
	}
}

// TestFeedNoIdleRereadsAfterABurst: moves signalled while a watch waits for
// a read slot are covered by that read and must not cost another one (each
// would hold a slot for rereadWait; after a feed outage hundreds queued up
// and delayed real changes by minutes). Node maintenance on and at once off
// moves all 200 watches twice: the second move reaches most of them while
// their read for the first waits for a slot.
func TestFeedNoIdleRereadsAfterABurst(t *testing.T) {
	t.Parallel()
	const services = 200
	a := consultest.Start(t)
	for i := range services {
		a.RegisterTTL(t, fmt.Sprintf("svc%d-a", i), fmt.Sprintf("svc%d", i), "10.0.0.1", 80, nil, nil)
	}
	c := newTestClient(t, a.Addr(), feedMode)
	ws := make([]*running, services)
	for i := range services {
		ws[i] = startWatch(t, c, Query{Service: fmt.Sprintf("svc%d", i)})
	}
	for i := range services {
		ws[i].rec.waitIDs(t, fmt.Sprintf("svc%d-a", i))
	}
	before := c.idleRereads.Load()
	a.NodeMaintenance(t, true)
	a.NodeMaintenance(t, false)
	for i := range services {
		ws[i].rec.waitIDs(t, fmt.Sprintf("svc%d-a", i))
	}
	waitFor(t, "the re-reads to settle", func() bool {
		for range 3 {
			if len(c.reads) > 0 {
				return false
			}
			time.Sleep(50 * time.Millisecond)
		}
		return true
	})
	idle := c.idleRereads.Load() - before
	t.Logf("re-reads that found nothing new: %d", idle)
	if idle > services/10 {
		t.Fatalf("%d re-reads found nothing new for %d services: moves covered by a read were read again", idle, services)
	}
}

// TestFeedPatchesCheckStatuses: a check entering a worse status is applied
// from the status answers without re-reading the service; one that may put
// an instance back is re-read, so an instance deregistered while critical
// or warning (its check leaves the status answer, as if passing) is never
// admitted again.
func TestFeedPatchesCheckStatuses(t *testing.T) {
	withPatches(t) // not parallel: patching is the package's
	a := consultest.Start(t)
	c := newTestClient(t, a.Addr(), feedMode)
	a.RegisterTTL(t, "web-a", "web", "10.0.0.1", 80, nil, nil)
	checkB := a.RegisterTTL(t, "web-b", "web", "10.0.0.2", 80, nil, nil)
	w := startWatch(t, c, Query{Service: "web"})
	w.rec.waitIDs(t, "web-a", "web-b")

	patches := c.patches.Load()
	a.SetCheck(t, checkB, api.HealthCritical)
	w.rec.waitIDs(t, "web-a")
	a.SetCheck(t, checkB, api.HealthWarning)
	waitFor(t, "web-b warning", func() bool {
		s, _ := w.rec.last()
		return len(s.Excluded) == 1 && s.Excluded[0].Status == api.HealthWarning
	})
	a.SetCheck(t, checkB, api.HealthPassing)
	w.rec.waitIDs(t, "web-a", "web-b")
	if got := c.patches.Load() - patches; got < 1 {
		t.Errorf("passing → critical was not patched in")
	}

	for i, status := range []string{api.HealthCritical, api.HealthWarning} {
		id := fmt.Sprintf("web-c%d", i)
		check := a.RegisterTTL(t, id, "web", "10.0.0.3", 80, nil, nil)
		w.rec.waitIDs(t, "web-a", "web-b", id)
		a.SetCheck(t, check, status)
		w.rec.waitIDs(t, "web-a", "web-b")
		from := w.rec.count()
		a.Deregister(t, id)
		waitFor(t, id+" gone", func() bool {
			s, _ := w.rec.last()
			return len(s.Instances) == 2 && len(s.Excluded) == 0
		})
		for _, s := range w.rec.all()[from:] {
			for _, in := range s.Instances {
				if in.ServiceID == id {
					t.Fatalf("%s, deregistered while %s, was admitted at index %d", id, status, s.Index)
				}
			}
		}
	}
}

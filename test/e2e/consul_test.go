package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// propagationBound is how soon a Consul change must show in the traffic,
// measured from the Consul API call returning (the requirement).
const propagationBound = time.Second

// consulUpstreamHCL is a consul block for the agent plus an upstream "web"
// routing "/" to the Consul service. upstreamExtra is pasted into the
// upstream's consul block.
func consulUpstreamHCL(consulAddr, service, upstreamConsulExtra, upstreamExtra string) string {
	return fmt.Sprintf(`
consul {
  address = %q
  wait    = "5s"
}

upstream "web" {
  route {
    path_prefix = "/"
  }
  consul {
    service = %q
%s
  }
%s
}
`, consulAddr, service, upstreamConsulExtra, upstreamExtra)
}

// load runs workers goroutines that GET url in a loop until Stop, counting
// successes and recording failures (transport errors, non-200 answers,
// bodies that are not a backend's greeting).
type load struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	ok       atomic.Int64
	failed   atomic.Int64
	mu       sync.Mutex
	failures []string // the first few
}

func startLoad(t *testing.T, c *http.Client, url string, workers int) *load {
	l := &load{stop: make(chan struct{})}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				r, err := get(c, url)
				switch {
				case err != nil:
					l.fail(fmt.Sprintf("%s: %v", time.Now().Format("15:04:05.000"), err))
				case r.Status != http.StatusOK || !strings.HasPrefix(r.Body, "hello from "):
					l.fail(fmt.Sprintf("%s: %d %s %q", time.Now().Format("15:04:05.000"), r.Status, r.Header.Get("X-Impulse-Error"), r.Body))
				default:
					l.ok.Add(1)
				}
			}
		}()
	}
	t.Cleanup(l.Stop) // idempotent; stops the load before the agent if the test bails out
	return l
}

func (l *load) fail(msg string) {
	l.failed.Add(1)
	l.mu.Lock()
	if len(l.failures) < 20 {
		l.failures = append(l.failures, msg)
	}
	l.mu.Unlock()
}

// Stop ends the load and waits for the workers.
func (l *load) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// check fails the test if any request failed so far.
func (l *load) check(t *testing.T) {
	t.Helper()
	if n := l.failed.Load(); n > 0 {
		l.mu.Lock()
		defer l.mu.Unlock()
		t.Errorf("%d of %d client requests failed; first ones:\n%s", n, n+l.ok.Load(), strings.Join(l.failures, "\n"))
	}
}

// expectStopsWithin waits (keeping the load running) until at least
// window has passed since t0 and other has served more requests, then fails
// unless be's last request arrived within propagationBound of t0. It
// returns how long after t0 be saw its last request.
func expectStopsWithin(t *testing.T, be, other *backend, t0 time.Time, window time.Duration) time.Duration {
	t.Helper()
	base := other.Hits()
	waitFor(t, window+10*time.Second, "the observation window with traffic on "+other.Name, func() bool {
		return time.Since(t0) >= window && other.Hits() >= base+50
	})
	last := time.Unix(0, be.lastHit.Load())
	after := last.Sub(t0)
	if after > propagationBound {
		t.Errorf("%s still received a request %s after the Consul change (bound %s)", be.Name, after.Round(100*time.Microsecond), propagationBound)
	}
	return after
}

// expectStartsWithin waits for be's first request after t0 and fails unless
// it came within propagationBound.
func expectStartsWithin(t *testing.T, be *backend, since int64, t0 time.Time) time.Duration {
	t.Helper()
	waitFor(t, 10*time.Second, be.Name+" to receive traffic", func() bool { return be.Hits() > since })
	first := time.Unix(0, be.lastHit.Load())
	if since == 0 {
		first = time.Unix(0, be.firstHit.Load())
	}
	after := first.Sub(t0)
	if after > propagationBound {
		t.Errorf("%s received its first request %s after the Consul change (bound %s)", be.Name, after.Round(100*time.Microsecond), propagationBound)
	}
	return after
}

// hasID reports whether ids has id; discovered backends are listed as
// "NODE/SERVICE-ID".
func hasID(ids []string, id string) bool {
	for _, x := range ids {
		if x == id || strings.HasSuffix(x, "/"+id) {
			return true
		}
	}
	return false
}

// TestConsulMembershipLive is the core scenario against a real
// Consul agent: two HTTP/1.1 instances registered in Consul share a steady
// load; deregistering one stops its traffic within 1 s, registering a third
// starts traffic to it within 1 s, and no client request fails throughout.
func TestConsulMembershipLive(t *testing.T) {
	consul := sharedConsul(t)
	const service = "e2e-live"
	b1, b2, b3 := newHTTP1Backend(t, "live-1"), newHTTP1Backend(t, "live-2"), newHTTP1Backend(t, "live-3")
	t.Cleanup(func() {
		for _, id := range []string{"live-1", "live-2", "live-3"} {
			_ = consul.Client().Agent().ServiceDeregister(id)
		}
	})
	// live-1 is reached as HTTP/1.1 because of the upstream's scheme, the
	// others also say so in their impulse-scheme meta.
	consul.RegisterTTL(t, "live-1", service, b1.Host, b1.Port, nil, nil)
	consul.RegisterTTL(t, "live-2", service, b2.Host, b2.Port, nil, map[string]string{"impulse-scheme": "http"})

	a := startAgent(t, baseHCL()+consulUpstreamHCL(consul.Addr(), service, `    scheme = "http"`, ""))
	waitFor(t, 10*time.Second, "/v1/ready 200", func() bool { code, _ := a.readyStatus(); return code == http.StatusOK })
	waitFor(t, 10*time.Second, "both instances in /v1/backends", func() bool { return len(a.backendIDs("web")) == 2 })

	c, _ := newH3Client(t)
	l := startLoad(t, c, a.URL("/"), 4)
	waitFor(t, 10*time.Second, "traffic on both instances", func() bool { return b1.Hits() > 20 && b2.Hits() > 20 })

	// A slow response from live-1 is in flight when it is deregistered: it
	// must complete intact. Round robin decides where each slow request
	// goes; those that land on live-2 are read in the background.
	const slowFirst, slowTotal = 64 << 10, 1 << 20
	slowURL := a.URL(fmt.Sprintf("/slow?first=%d&total=%d&sleep=1500ms", slowFirst, slowTotal))
	var others sync.WaitGroup
	readSlow := func(resp *http.Response) error {
		defer resp.Body.Close()
		h := newCountingHash()
		if _, err := io.Copy(h, resp.Body); err != nil {
			return fmt.Errorf("slow response from %s: %v after %d bytes", resp.Header.Get("X-Backend"), err, h.n)
		}
		if h.n != slowTotal || h.Sum() != patternSHA256(slowTotal) {
			return fmt.Errorf("slow response from %s: %d bytes sha256 %s", resp.Header.Get("X-Backend"), h.n, h.Sum())
		}
		return nil
	}
	var slow *http.Response
	for i := 0; i < 20 && slow == nil; i++ {
		resp, err := c.Get(slowURL)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("slow request: %v %v", err, resp)
		}
		if resp.Header.Get("X-Backend") == "live-1" {
			slow = resp
			break
		}
		others.Add(1)
		go func() {
			defer others.Done()
			if err := readSlow(resp); err != nil {
				t.Error(err)
			}
		}()
	}
	if slow == nil {
		t.Fatalf("20 slow requests and none went to live-1")
	}

	// Deregister live-1 under load.
	consul.Deregister(t, "live-1")
	t0 := time.Now()
	waitFor(t, 10*time.Second, "live-1 to leave /v1/backends", func() bool { return !hasID(a.backendIDs("web"), "live-1") })
	removed := time.Since(t0)
	draining := false
	for _, bi := range a.backends() {
		draining = draining || (hasID([]string{bi.ID}, "live-1") && bi.Membership == "removed" && bi.InFlight == 1)
	}
	if !draining {
		t.Errorf("/v1/backends does not list live-1 as removed with its slow request in flight: %+v", a.backends())
	}
	last := expectStopsWithin(t, b1, b2, t0, 2*propagationBound)
	t.Logf("deregister live-1: gone from /v1/backends after %s; its last request arrived %s after the Consul call returned",
		removed.Round(100*time.Microsecond), last.Round(100*time.Microsecond))
	if err := readSlow(slow); err != nil {
		t.Errorf("the response in flight on live-1 when it was deregistered: %v", err)
	} else {
		t.Logf("the slow response in flight on live-1 when it was deregistered completed intact")
	}
	others.Wait()

	// Register live-3 under load.
	consul.RegisterTTL(t, "live-3", service, b3.Host, b3.Port, nil, map[string]string{"impulse-scheme": "http"})
	t1 := time.Now()
	first := expectStartsWithin(t, b3, 0, t1)
	t.Logf("register live-3: its first request arrived %s after the Consul call returned", first.Round(100*time.Microsecond))
	waitFor(t, 10*time.Second, "live-3 to take a share of the load", func() bool { return b3.Hits() > 50 })

	l.Stop()
	l.check(t)
	t.Logf("client requests: %d ok, %d failed; backend hits live-1 %d, live-2 %d, live-3 %d",
		l.ok.Load(), l.failed.Load(), b1.Hits(), b2.Hits(), b3.Hits())
	if ids := a.backendIDs("web"); len(ids) != 2 || !hasID(ids, "live-2") || !hasID(ids, "live-3") || ids[0] != consul.Node()+"/live-2" {
		t.Errorf("/v1/backends for web: %v, want live-2 and live-3", ids)
	}
	a.Stop()
}

// TestConsulCheckCritical: an instance whose TTL check goes critical stops
// receiving traffic; when it passes again it receives traffic again. The
// instances are mixed: one HTTP/1.1 (impulse-scheme meta), one HTTP/2 over
// TLS (the upstream's default scheme, https).
func TestConsulCheckCritical(t *testing.T) {
	consul := sharedConsul(t)
	const service = "e2e-check"
	h1, h2 := newHTTP1Backend(t, "check-h1"), newH2Backend(t, "check-h2")
	t.Cleanup(func() {
		for _, id := range []string{"check-h1", "check-h2"} {
			_ = consul.Client().Agent().ServiceDeregister(id)
		}
	})
	check1 := consul.RegisterTTL(t, "check-h1", service, h1.Host, h1.Port, nil, map[string]string{"impulse-scheme": "http"})
	check2 := consul.RegisterTTL(t, "check-h2", service, h2.Host, h2.Port, nil, nil)

	a := startAgent(t, baseHCL()+consulUpstreamHCL(consul.Addr(), service, "", tlsHCL(h2.CAFile)))
	waitFor(t, 10*time.Second, "both instances in /v1/backends", func() bool { return len(a.backendIDs("web")) == 2 })
	for _, b := range a.backends() {
		_, id, _ := strings.Cut(b.ID, "/")
		want := map[string]string{"check-h1": "http/1.1", "check-h2": "h2"}[id]
		if b.Protocol != want || b.Source != "discovery" {
			t.Errorf("/v1/backends %s: protocol %q source %q, want %q discovery", b.ID, b.Protocol, b.Source, want)
		}
	}

	c, _ := newH3Client(t)
	l := startLoad(t, c, a.URL("/"), 4)
	waitFor(t, 10*time.Second, "traffic on both instances", func() bool { return h1.Hits() > 20 && h2.Hits() > 20 })

	for _, tc := range []struct {
		be, other *backend
		check     string
	}{{h1, h2, check1}, {h2, h1, check2}} {
		consul.SetCheck(t, tc.check, api.HealthCritical)
		t0 := time.Now()
		last := expectStopsWithin(t, tc.be, tc.other, t0, 2*propagationBound)
		if hasID(a.backendIDs("web"), tc.be.Name) {
			t.Errorf("%s still listed in /v1/backends while critical", tc.be.Name)
		}
		t.Logf("%s critical: its last request arrived %s after the Consul call returned", tc.be.Name, last.Round(100*time.Microsecond))

		before := tc.be.Hits()
		consul.SetCheck(t, tc.check, api.HealthPassing)
		t1 := time.Now()
		first := expectStartsWithin(t, tc.be, before, t1)
		t.Logf("%s passing again: a request arrived %s after the Consul call returned", tc.be.Name, first.Round(100*time.Microsecond))
	}

	// A reload under load (same file) keeps the discovered instances and
	// fails no request.
	code, body := a.control("POST", "/v1/reload", nil)
	if code != http.StatusOK {
		t.Fatalf("POST /v1/reload: %d %s", code, body)
	}
	if ids := a.backendIDs("web"); len(ids) != 2 {
		t.Errorf("/v1/backends after reload: %v, want both instances", ids)
	}
	n1, n2 := h1.Hits(), h2.Hits()
	waitFor(t, 10*time.Second, "traffic on both instances after the reload", func() bool { return h1.Hits() > n1+20 && h2.Hits() > n2+20 })

	l.Stop()
	l.check(t)
	t.Logf("client requests: %d ok, %d failed; backend hits check-h1 %d, check-h2 %d", l.ok.Load(), l.failed.Load(), h1.Hits(), h2.Hits())
	a.Stop()
}

// TestDiscoveryPendingThenReady: the agent starts while its Consul agent is
// down (a consultest agent started for its fixed ports, then stopped, so
// nothing listens on the address the configuration names). Requests answer
// 503 x-impulse-error: discovery_pending and /v1/ready is 503 naming the
// service; once Consul is up again with an instance, traffic flows and
// /v1/ready turns 200.
func TestDiscoveryPendingThenReady(t *testing.T) {
	consul := consultest.Start(t)
	consul.Stop()
	const service = "e2e-pending"
	be := newHTTP1Backend(t, "pending-1")
	a := startAgent(t, baseHCL()+consulUpstreamHCL(consul.Addr(), service, `    scheme = "http"`, ""))
	c, _ := newH3Client(t)

	r := mustGet(t, c, a.URL("/x"))
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("X-Impulse-Error") != "discovery_pending" {
		t.Errorf("GET /x before Consul answered: %d x-impulse-error=%q %q, want 503 discovery_pending", r.Status, r.Header.Get("X-Impulse-Error"), r.Body)
	}
	// Wait for a failed query so the reason carries the error too.
	a.waitLog(10*time.Second, "consul query failed; keeping the last known instances", nil)
	code, ready := a.readyStatus()
	t.Logf("/v1/ready while Consul is down: %d %+v", code, ready)
	if code != http.StatusServiceUnavailable || ready.Ready || !strings.Contains(strings.Join(ready.Reasons, "\n"), service) {
		t.Errorf("/v1/ready while Consul is down: %d %+v, want 503 with a reason naming %s", code, ready, service)
	}
	if be.Hits() != 0 {
		t.Errorf("the backend got %d requests before it was discovered", be.Hits())
	}

	start := time.Now()
	consul.Restart()
	consul.RegisterTTL(t, "pending-1", service, be.Host, be.Port, nil, nil)
	registered := time.Now()
	waitFor(t, 30*time.Second, "traffic to the discovered instance", func() bool {
		r, err := get(c, a.URL("/x"))
		return err == nil && r.Status == http.StatusOK && r.Body == "hello from pending-1\n"
	})
	flowing := time.Now()
	if code, ready := a.readyStatus(); code != http.StatusOK || !ready.Ready {
		t.Errorf("/v1/ready once Consul answered: %d %+v, want 200", code, ready)
	}
	t.Logf("Consul restarted in %s; traffic flowed %s after the registration",
		registered.Sub(start).Round(time.Millisecond), flowing.Sub(registered).Round(time.Millisecond))
	a.Stop()
}

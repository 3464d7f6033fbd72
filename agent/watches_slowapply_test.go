package agent

import (
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// gatedSink is the real gateway behind a gate: while the gate is shut,
// SetDiscovered waits as it does behind a slow gateway Apply, which holds the
// mutex SetDiscovered takes. A real Apply cannot be made slow on demand.
type gatedSink struct {
	gw       *gateway.Gateway
	waiting  chan struct{} // a value when a call starts waiting at the gate
	inFlight atomic.Int32

	mu   sync.Mutex
	gate chan struct{} // non-nil while shut
}

func (s *gatedSink) SetDiscovered(name string, specs []upstream.Spec) error {
	s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case s.waiting <- struct{}{}:
		default:
		}
		<-gate
	}
	return s.gw.SetDiscovered(name, specs)
}

func (s *gatedSink) shut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *gatedSink) open() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

// TestSlowApplyNeverBlocksDelivery holds the gateway for at least 3 s while
// a feed is waiting on it and a reload (a new scheme) comes in.
// Meanwhile Consul changes keep coming: each one reaches the watch (deliver
// ran and returned) well within the block, with the discovery set's lock free
// too. Once the gateway is released, it ends up with Consul's final instance
// set under the reload's scheme: the stale copy the blocked feed held does
// not win.
func TestSlowApplyNeverBlocksDelivery(t *testing.T) {
	const (
		service = "slow-apply"
		block   = 3 * time.Second
		// Far below block; includes the watch's rate limit (2 queries/s).
		deliverBound = 1500 * time.Millisecond
	)
	consul := consultest.Start(t)
	gw, err := gateway.New(gateway.Config{Upstreams: []gateway.UpstreamConfig{
		{Config: upstreamCfg("web", true), Routes: []gateway.RouteConfig{{PathPrefix: "/"}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Shutdown(t.Context())
	sink := &gatedSink{gw: gw, waiting: make(chan struct{}, 1)}
	d := newDiscoverySet(hclog.NewNullLogger(), nil, sink, nil)
	defer d.stop()
	defer sink.open() // before d.stop: the applier may be at the gate

	cfg := func(scheme string) *hcl.Config {
		return &hcl.Config{
			Consul: &hcl.Consul{Address: consul.Addr(), Scheme: "http", Wait: 5 * time.Second},
			Upstreams: []hcl.Upstream{{Name: "web",
				Consul: &hcl.UpstreamConsul{Service: service, Health: hcl.DefaultHealth, Scheme: scheme}}},
		}
	}
	registered := map[string]bool{}
	toggle := func(i int) {
		id := fmt.Sprintf("slow-%d", i)
		if registered[id] {
			consul.Deregister(t, id)
			delete(registered, id)
		} else {
			consul.RegisterTTL(t, id, service, "127.0.0.1", 20000+i, nil, nil)
			registered[id] = true
		}
	}
	want := func() map[string]bool {
		m := map[string]bool{}
		for id := range registered {
			m[consul.Node()+"/"+id] = true
		}
		return m
	}
	// watchHas reports whether the watch recorded exactly ids. It never
	// waits for a lock, so a delivery stuck behind the gateway shows as a
	// timeout, not a hang.
	watchHas := func(ids map[string]bool) bool {
		if !d.mu.TryLock() {
			return false
		}
		w := d.watches[query(&hcl.UpstreamConsul{Service: service, Health: hcl.DefaultHealth}).Key()]
		d.mu.Unlock()
		if w == nil || !w.mu.TryLock() {
			return false
		}
		defer w.mu.Unlock()
		got := map[string]bool{}
		if w.last != nil {
			for _, in := range w.last.Instances {
				got[in.ID] = true
			}
		}
		return w.last != nil && maps.Equal(got, ids)
	}
	gatewayHas := func(ids map[string]bool, protocol string) bool {
		got := map[string]bool{}
		for _, b := range gw.Backends() {
			if b.Upstream == "web" && b.Membership == "active" {
				got[b.ID] = b.Protocol == protocol
			}
		}
		return maps.Equal(got, ids)
	}
	waitFor := func(what string, timeout time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > timeout {
				t.Fatalf("%s: not within %s", what, timeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
		return time.Since(start)
	}

	toggle(0)
	toggle(1)
	if err := d.apply(cfg("http"), false); err != nil {
		t.Fatal(err)
	}
	waitFor("the first instances in the gateway", 20*time.Second, func() bool { return gatewayHas(want(), "http/1.1") })

	sink.shut()
	toggle(2)
	select {
	case <-sink.waiting:
	case <-time.After(20 * time.Second):
		t.Fatal("no feed reached the shut gateway")
	}
	blocked := time.Now()
	reloaded, reloadDone := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(reloadDone)
		reloaded <- d.apply(cfg("h2c"), false)
	}()
	defer func() { sink.open(); <-reloadDone }()

	changes, slowest := 0, time.Duration(0)
	for i := 3; changes < 3 || time.Since(blocked) < block; i++ {
		toggle(i % 5)
		changes++
		took := waitFor(fmt.Sprintf("change %d reaching the watch while the gateway is blocked", changes), deliverBound,
			func() bool { return watchHas(want()) })
		slowest = max(slowest, took)
	}
	t.Logf("%d changes delivered during a %s block, slowest %s", changes, time.Since(blocked).Round(time.Millisecond), slowest)

	sink.open()
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	// Quiet: nothing dirty, no feed in flight; what the gateway has now stays.
	waitFor("Consul's final instances, under the reload's scheme, in the gateway", 20*time.Second, func() bool {
		d.mu.Lock()
		dirty := false
		for _, w := range d.watches {
			w.mu.Lock()
			dirty = dirty || w.dirty
			w.mu.Unlock()
		}
		d.mu.Unlock()
		return !dirty && sink.inFlight.Load() == 0 && gatewayHas(want(), "h2c")
	})
}

package agent

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// discoverySet owns the discovery client and one watch per distinct Consul
// query; several upstreams with the same query share one blocking loop.
type discoverySet struct {
	log     hclog.Logger
	metrics *metrics.Metrics
	gw      *gateway.Gateway

	mu      sync.Mutex // guards everything below
	client  *discovery.Client
	consul  hcl.Consul // the settings client was built from
	watches map[string]*watch
}

// watch is one running blocking loop and the upstreams it feeds.
type watch struct {
	q      discovery.Query
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	subs map[string]string // upstream name → scheme for discovered instances
	last *discovery.Snapshot
}

func newDiscoverySet(log hclog.Logger, m *metrics.Metrics, gw *gateway.Gateway) *discoverySet {
	return &discoverySet{log: log, metrics: m, gw: gw, watches: map[string]*watch{}}
}

// apply starts, re-targets and stops watches so that they match cfg. A
// changed consul block restarts every watch with a new client.
func (d *discoverySet) apply(cfg *hcl.Config) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := map[string]map[string]string{} // query key → upstream → scheme
	queries := map[string]discovery.Query{}
	for _, u := range cfg.Upstreams {
		if u.Consul == nil {
			continue
		}
		q := query(u.Consul)
		k := q.Key()
		if want[k] == nil {
			want[k] = map[string]string{}
		}
		want[k][u.Name] = u.Consul.Scheme
		queries[k] = q
	}
	if len(want) == 0 || cfg.Consul == nil {
		d.stopLocked()
		return nil
	}
	if d.client == nil || !sameConsul(d.consul, *cfg.Consul) {
		d.stopLocked()
		dc := discoveryConfig(cfg.Consul)
		dc.Logger, dc.Metrics = d.log, d.metrics
		c, err := discovery.New(dc)
		if err != nil {
			return fmt.Errorf("agent: consul: %w", err)
		}
		d.client, d.consul = c, *cfg.Consul
	}
	for k, w := range d.watches {
		if _, ok := want[k]; !ok {
			w.cancel()
			<-w.done
			delete(d.watches, k)
		}
	}
	for k, subs := range want {
		w := d.watches[k]
		if w == nil {
			w = d.startLocked(queries[k])
			d.watches[k] = w
		}
		w.setSubscribers(d, subs)
	}
	return nil
}

func sameConsul(a, b hcl.Consul) bool {
	ta, tb := hcl.TLS{}, hcl.TLS{}
	if a.TLS != nil {
		ta = *a.TLS
	}
	if b.TLS != nil {
		tb = *b.TLS
	}
	a.TLS, b.TLS, a.Register, b.Register = nil, nil, nil, nil
	return a == b && ta == tb
}

func (d *discoverySet) startLocked(q discovery.Query) *watch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &watch{q: q, cancel: cancel, done: make(chan struct{}), subs: map[string]string{}}
	client := d.client
	go func() {
		defer close(w.done)
		defer func() {
			if p := recover(); p != nil {
				d.log.Error("watch panicked", "service", q.Service, "panic", p)
			}
		}()
		_ = client.Watch(ctx, q, func(s discovery.Snapshot) { w.deliver(d, s) })
	}()
	return w
}

// deliver converts a snapshot for every subscribed upstream and hands it to
// the gateway. It runs on the watch goroutine; SetDiscovered only swaps
// pointers, so it never blocks the watch for long.
func (w *watch) deliver(d *discoverySet, s discovery.Snapshot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = &s
	for up, scheme := range w.subs {
		d.feed(up, scheme, s)
	}
}

func (w *watch) setSubscribers(d *discoverySet, subs map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for up, scheme := range subs {
		if old, ok := w.subs[up]; (!ok || old != scheme) && w.last != nil {
			d.feed(up, scheme, *w.last)
		}
	}
	w.subs = subs
}

func (d *discoverySet) feed(up, scheme string, s discovery.Snapshot) {
	sp, skipped := specs(s, scheme)
	if len(skipped) > 0 {
		d.log.Warn("skipping instances with an unusable address, port or impulse-scheme", "upstream", up, "service", s.Query.Service, "instances", skipped)
	}
	if err := d.gw.SetDiscovered(up, sp); err != nil {
		d.log.Error("applying discovered backends", "upstream", up, "error", err)
		return
	}
	d.log.Debug("discovered backends applied", "upstream", up, "service", s.Query.Service, "backends", len(sp), "index", s.Index)
}

// notReady lists watches that have not synced once, with their last error.
func (d *discoverySet) notReady() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, w := range d.watches {
		w.mu.Lock()
		synced := w.last != nil
		w.mu.Unlock()
		if !synced {
			msg := "consul service " + w.q.Service + ": not synced yet"
			for _, st := range d.client.Status() {
				if st.Query.Key() == w.q.Key() && st.LastError != "" {
					msg += " (last error: " + st.LastError + ")"
				}
			}
			out = append(out, msg)
		}
	}
	sort.Strings(out)
	return out
}

func (d *discoverySet) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopLocked()
}

func (d *discoverySet) stopLocked() {
	for k, w := range d.watches {
		w.cancel()
		<-w.done
		delete(d.watches, k)
	}
	if d.client != nil {
		d.client.Close()
		d.client = nil
	}
}

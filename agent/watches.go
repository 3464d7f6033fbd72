package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// Coalescing of discovery updates (architecture.md practice 5): a burst of
// snapshots is applied once it has been quiet for coalesceQuiet, and never
// later than coalesceMax after the first one.
const (
	coalesceQuiet = 20 * time.Millisecond
	coalesceMax   = 500 * time.Millisecond
)

// discoverySet owns the discovery client, one watch per distinct Consul
// query (several upstreams with the same query share one blocking loop) and,
// in the catalog mode, the catalog watch. Watches only record their latest
// snapshot and kick the applier goroutine, so a slow apply never blocks a
// watch (latest wins).
//
// Lock order: feedMu, mu, a watch's mu. The gateway is called with feedMu
// alone held: a gateway Apply in progress holds up feeds, never a watch.
type discoverySet struct {
	log     hclog.Logger
	metrics *metrics.Metrics
	// staleTick and staleN pace sampleStaleness (guarded by mu): the ticks
	// since the last sample, and the watches it saw.
	staleTick, staleN int
	gw                backendSink
	// feedMu is held from copying snapshots to feeding them (flush, apply),
	// so the gateway receives them in the order they were copied.
	feedMu  sync.Mutex
	kick    chan struct{} // capacity 1: "something is dirty"
	stopApp context.CancelFunc
	appDone chan struct{}
	// onCatalog is called by the applier, without any lock held, after a
	// flush that saw a new catalog snapshot or new instances of a catalog
	// upstream: the gateway configuration may have to change.
	onCatalog func()

	mu      sync.Mutex // guards everything below
	client  *discovery.Client
	consul  hcl.Consul // the settings client was built from
	token   string     // the token it uses (token_file content on reload may change)
	watches map[string]*watch
	catalog *catalogWatch // nil unless the catalog mode is on
	// metaMemo keeps, per catalog service, the last non-empty instance set
	// (see catalogState.Instances).
	metaMemo map[string][]discovery.Instance
}

// backendSink receives discovered backends: the gateway (*gateway.Gateway).
type backendSink interface {
	SetDiscovered(name string, specs []upstream.Spec) error
}

// feedItem is one upstream's snapshot, copied under the watch lock and fed
// after it is released.
type feedItem struct {
	up, scheme string
	s          discovery.Snapshot
}

// catalogWatch is the running catalog watch.
type catalogWatch struct {
	q      discovery.CatalogQuery
	cancel context.CancelFunc
	done   chan struct{}

	// since stands for the last successful query until the watch has one
	// of its own: the old watch's when it took over from one, else its start.
	since time.Time

	mu    sync.Mutex
	last  *discovery.CatalogSnapshot
	dirty bool
	// applied: a catalog reached the gateway (or was carried over from an
	// old watch): readiness waits for it, not just for the answer.
	applied bool
}

// watch is one running blocking loop and the upstreams it feeds.
type watch struct {
	q      discovery.Query
	cancel context.CancelFunc
	done   chan struct{}
	since  time.Time // as catalogWatch.since

	mu    sync.Mutex
	subs  map[string]string // upstream name → scheme for discovered instances
	last  *discovery.Snapshot
	dirty bool // last not yet applied
	// applied: a snapshot reached the upstreams (or was carried over from
	// an old watch): readiness waits for it, not just for the answer.
	applied bool
	// downSince is when each of last's excluded instances was first seen
	// excluded (by instance ID), for the status page's "last change".
	downSince map[string]time.Time
}

func newDiscoverySet(log hclog.Logger, m *metrics.Metrics, gw backendSink, onCatalog func()) *discoverySet {
	ctx, cancel := context.WithCancel(context.Background())
	d := &discoverySet{log: log, metrics: m, gw: gw, watches: map[string]*watch{}, onCatalog: onCatalog,
		metaMemo: map[string][]discovery.Instance{},
		kick:     make(chan struct{}, 1), stopApp: cancel, appDone: make(chan struct{})}
	go d.applier(ctx)
	return d
}

// applier applies dirty snapshots after a quiet period, until ctx is done.
func (d *discoverySet) applier(ctx context.Context) {
	defer close(d.appDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		}
		deadline := time.Now().Add(coalesceMax)
	quiet:
		for {
			t := time.NewTimer(min(coalesceQuiet, time.Until(deadline)))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-d.kick:
				t.Stop()
				if time.Now().After(deadline) {
					break quiet
				}
			case <-t.C:
				break quiet
			}
		}
		d.flush()
	}
}

// flush feeds every dirty watch's latest snapshot to its upstreams, then
// calls onCatalog when the catalog or a catalog upstream's instances changed.
func (d *discoverySet) flush() {
	d.feedMu.Lock()
	d.mu.Lock()
	catalogChanged := false
	cat := d.catalog
	if c := cat; c != nil {
		c.mu.Lock()
		catalogChanged, c.dirty = c.dirty, false
		c.mu.Unlock()
	}
	var feeds []feedItem
	var flushed []*watch
	for _, w := range d.watches {
		w.mu.Lock()
		if w.dirty {
			w.dirty = false
			flushed = append(flushed, w)
			for up, scheme := range w.subs {
				feeds = append(feeds, feedItem{up, scheme, *w.last})
				catalogChanged = catalogChanged || (d.catalog != nil && strings.HasPrefix(up, hcl.CatalogUpstreamPrefix))
			}
		}
		w.mu.Unlock()
	}
	d.mu.Unlock()
	d.feedAll(feeds)
	d.feedMu.Unlock()
	for _, w := range flushed {
		w.mu.Lock()
		w.applied = true // readiness: only once the gateway has it
		w.mu.Unlock()
	}
	if catalogChanged && d.onCatalog != nil {
		d.onCatalog()
	}
	if cat != nil && catalogChanged {
		cat.mu.Lock()
		cat.applied = cat.applied || cat.last != nil
		cat.mu.Unlock()
	}
}

// apply starts, re-targets and stops watches so that they match cfg. A
// changed consul block restarts every watch with a new client. keepToken
// (catalog changes) reuses the running client's token instead of reading
// token_file again: that happens on reloads only.
func (d *discoverySet) apply(cfg *hcl.Config, keepToken bool) error {
	d.feedMu.Lock()
	defer d.feedMu.Unlock()
	d.mu.Lock()
	feeds, err := d.retargetLocked(cfg, keepToken)
	d.mu.Unlock()
	d.feedAll(feeds)
	return err
}

// retargetLocked does apply's work under d.mu and returns the snapshots that
// upstreams new to a watch (or with a new scheme) are to be fed.
func (d *discoverySet) retargetLocked(cfg *hcl.Config, keepToken bool) ([]feedItem, error) {
	want := map[string]map[string]string{} // query key → upstream → scheme
	queries := map[string]discovery.Query{}
	for _, u := range cfg.Upstreams {
		if u.Consul == nil {
			continue
		}
		q, k := query(u.Consul), queryKey(u.Consul)
		if want[k] == nil {
			want[k] = map[string]string{}
		}
		want[k][u.Name] = u.Consul.Scheme
		queries[k] = q
	}
	if cfg.Consul == nil || (len(want) == 0 && !cfg.Consul.CatalogEnabled()) {
		d.stopLocked()
		return nil, nil
	}
	token := d.token
	if !keepToken || d.client == nil {
		var err error
		if token, err = resolveToken(cfg.Consul); err != nil {
			return nil, err
		}
	}
	carried := map[string]*discovery.Snapshot{}
	var carriedCatalog *discovery.CatalogSnapshot
	since := map[string]time.Time{} // query key (catalogKey) → last success
	if d.client == nil || !sameConsul(d.consul, *cfg.Consul) || token != d.token {
		// The new client's watches start from what the old ones knew: the
		// upstreams keep their instances, readiness stays synced and its
		// staleness keeps counting from the old watches' last success.
		for k, w := range d.watches {
			w.mu.Lock()
			carried[k] = w.last
			w.mu.Unlock()
			since[k] = w.since // an old watch that never succeeded passes its own on
		}
		carriedCatalog = d.catalogLast()
		if d.catalog != nil {
			since[catalogKey] = d.catalog.since
		}
		if d.client != nil {
			for _, st := range d.client.Status() {
				if st.Connect != nil {
					continue
				}
				k := st.Query.Key()
				if st.Catalog != nil {
					k = catalogKey
				}
				if !st.LastSuccess.IsZero() {
					since[k] = st.LastSuccess
				}
			}
		}
		d.stopLocked()
		dc := discoveryConfig(cfg.Consul)
		dc.Token, dc.TokenFile = token, ""
		dc.Logger, dc.Metrics = d.log, d.metrics
		c, err := discovery.New(dc)
		if err != nil {
			return nil, fmt.Errorf("agent: consul: %w", err)
		}
		d.client, d.consul, d.token = c, *cfg.Consul, token
	}
	for k, w := range d.watches {
		if _, ok := want[k]; !ok {
			w.cancel()
			<-w.done
			delete(d.watches, k)
		}
	}
	var feeds []feedItem
	for k, subs := range want {
		w := d.watches[k]
		if w == nil {
			w = d.startLocked(queries[k], carried[k], since[k])
			d.watches[k] = w
		}
		feeds = append(feeds, w.setSubscribers(subs)...)
	}
	d.applyCatalogLocked(cfg.Consul, carriedCatalog, since[catalogKey])
	return feeds, nil
}

// catalogKey keys the catalog watch among service query keys, which never
// start with "/".
const catalogKey = discovery.CatalogEndpoint

// applyCatalogLocked starts, restarts (on a changed query) or stops the
// catalog watch. A restarted watch starts from the last known catalog
// (carried, or the old watch's), so catalog upstreams stay until the new
// query answers.
func (d *discoverySet) applyCatalogLocked(c *hcl.Consul, carried *discovery.CatalogSnapshot, since time.Time) {
	if !c.CatalogEnabled() {
		d.stopCatalogLocked()
		return
	}
	q := discovery.CatalogQuery{TagPrefix: c.Catalog.TagPrefix, Filter: c.Catalog.Filter}
	if d.catalog != nil && d.catalog.q == q {
		return
	}
	if last := d.catalogLast(); last != nil {
		carried = last
	}
	if since.IsZero() {
		since = time.Now()
	}
	// Only a watch of the same query takes over: under a changed query, what
	// the old one knew says nothing of what the new one will find.
	var seed *discovery.CatalogSnapshot
	if carried != nil && carried.Query == q {
		seed = carried
	}
	d.stopCatalogLocked()
	ctx, cancel := context.WithCancel(context.Background())
	cw := &catalogWatch{q: q, cancel: cancel, done: make(chan struct{}), last: carried, since: since, applied: carried != nil}
	client := d.client
	go func() {
		defer close(cw.done)
		defer func() {
			if p := recover(); p != nil {
				d.log.Error("catalog watch panicked", "panic", p)
			}
		}()
		_ = client.WatchCatalogFrom(ctx, q, seed, func(s discovery.CatalogSnapshot) {
			cw.mu.Lock()
			cw.last, cw.dirty = &s, true
			cw.mu.Unlock()
			select {
			case d.kick <- struct{}{}:
			default:
			}
		})
	}()
	d.catalog = cw
}

// catalogLast is the catalog watch's latest snapshot (nil: none yet).
func (d *discoverySet) catalogLast() *discovery.CatalogSnapshot {
	if d.catalog == nil {
		return nil
	}
	d.catalog.mu.Lock()
	defer d.catalog.mu.Unlock()
	return d.catalog.last
}

func (d *discoverySet) stopCatalogLocked() {
	if d.catalog != nil {
		d.catalog.cancel()
		<-d.catalog.done
		d.catalog = nil
	}
}

// catalogState returns the latest catalog and, for each of its services,
// the passing instances the watch of its catalog upstream reported last (the
// last non-empty set when it became empty).
func (d *discoverySet) catalogState() catalogState {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := catalogState{Instances: map[string][]discovery.Instance{}}
	last := d.catalogLast()
	if last == nil {
		return st
	}
	st.Synced, st.Services = true, last.Services
	for svc := range d.metaMemo {
		if _, ok := last.Services[svc]; !ok {
			delete(d.metaMemo, svc)
		}
	}
	for svc := range last.Services {
		if w := d.watches[queryKey(&hcl.UpstreamConsul{Service: svc, Health: hcl.DefaultHealth})]; w != nil {
			w.mu.Lock()
			if w.last != nil && len(w.last.Instances) > 0 {
				d.metaMemo[svc] = w.last.Instances
			}
			w.mu.Unlock()
		}
		if ins, ok := d.metaMemo[svc]; ok {
			st.Instances[svc] = ins
		}
	}
	return st
}

// startLocked starts a watch of q. last is what an old watch of q knew (nil:
// none), since that watch's last success (zero: none).
func (d *discoverySet) startLocked(q discovery.Query, last *discovery.Snapshot, since time.Time) *watch {
	ctx, cancel := context.WithCancel(context.Background())
	if since.IsZero() {
		since = time.Now()
	}
	w := &watch{q: q, cancel: cancel, done: make(chan struct{}), subs: map[string]string{}, last: last, since: since,
		applied: last != nil}
	client := d.client
	go func() {
		defer close(w.done)
		defer func() {
			if p := recover(); p != nil {
				d.log.Error("watch panicked", "service", q.Service, "panic", p)
			}
		}()
		_ = client.WatchFrom(ctx, q, last, func(s discovery.Snapshot) { w.deliver(d, s) })
	}()
	return w
}

// deliver records the latest snapshot and kicks the applier. It runs on the
// watch goroutine and never waits for the gateway.
func (w *watch) deliver(d *discoverySet, s discovery.Snapshot) {
	w.mu.Lock()
	w.last, w.dirty = &s, true
	w.downSince = excludedSince(w.downSince, s) // status.go
	w.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// setSubscribers replaces the watch's upstreams and returns what the new
// ones (and those with a new scheme) are to be fed.
func (w *watch) setSubscribers(subs map[string]string) (feeds []feedItem) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for up, scheme := range subs {
		if old, ok := w.subs[up]; (!ok || old != scheme) && w.last != nil && !w.dirty {
			feeds = append(feeds, feedItem{up, scheme, *w.last})
		}
	}
	w.subs = subs // a dirty snapshot reaches every subscriber at the next flush
	return feeds
}

// feedAll feeds copied snapshots to the gateway. d.feedMu must be held, and
// neither d.mu nor a watch's mu: the gateway may be slow.
func (d *discoverySet) feedAll(feeds []feedItem) {
	for _, f := range feeds {
		d.feed(f.up, f.scheme, f.s)
	}
}

func (d *discoverySet) feed(up, scheme string, s discovery.Snapshot) {
	sp, skipped := specs(s, scheme)
	if len(skipped) > 0 {
		d.log.Warn("suppressing instances with an unusable address, port or impulse-scheme", "upstream", up, "service", s.Query.Service, "instances", skipped)
	}
	if err := d.gw.SetDiscovered(up, sp); err != nil {
		d.log.Error("applying discovered backends", "upstream", up, "error", err)
		return
	}
	d.log.Debug("discovered backends applied", "upstream", up, "service", s.Query.Service, "backends", len(sp), "index", s.Index)
}

func (d *discoverySet) stop() {
	d.mu.Lock()
	d.stopLocked()
	d.mu.Unlock()
	d.stopApp()
	<-d.appDone
}

func (d *discoverySet) stopLocked() {
	d.stopCatalogLocked()
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

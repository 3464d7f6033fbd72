package discovery

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// WatchStatus describes one running watch, for readiness reporting.
type WatchStatus struct {
	// Query is the service query of a [Client.Watch]; zero for a catalog
	// watch.
	Query Query
	// Catalog is set for a [Client.WatchCatalog] instead of Query.
	Catalog *CatalogQuery
	// Connect is set for a Connect watch ([Client.WatchRoots],
	// [Client.WatchLeaf], [Client.WatchIntentions]) instead of Query.
	Connect *ConnectQuery
	// Synced is true once at least one query succeeded (a snapshot was emitted).
	Synced bool
	// LastSuccess is when the last query succeeded; zero before the first.
	LastSuccess time.Time
	// LastError is the error of the last query, "" when it succeeded. It
	// names the endpoint and the HTTP status or failure reason; never a token.
	LastError string
	// LastErrorReason classifies LastError like the query.errors metric:
	// timeout, transport, decode, acl_filtered or http_<status>.
	LastErrorReason string
	// LastIndex is the X-Consul-Index of the last successful reply.
	LastIndex uint64
	// Instances is the size of the last emitted snapshot (for a catalog
	// watch: the number of services).
	Instances int
	// FeedError is true when LastError is the failure of the change feed the
	// watch follows (Config.ChangeFeed), shared by every watch of its scope,
	// not of the watch's own reads.
	FeedError bool
}

// watchState is the mutable status of one Watch call.
type watchState struct {
	mu sync.Mutex
	st WatchStatus
	// feed is the change feed the watch follows (Config.ChangeFeed); nil
	// when it holds its own blocking query.
	feed *feed
}

func (w *watchState) update(f func(*WatchStatus)) {
	w.mu.Lock()
	f(&w.st)
	w.mu.Unlock()
}

// Status returns the status of every running watch: catalog watches first,
// then service watches sorted by Query.Key(), then Connect watches sorted by
// endpoint. Watches that returned are not listed.
func (c *Client) Status() []WatchStatus {
	c.mu.Lock()
	out := make([]WatchStatus, 0, len(c.watches))
	var feeds []*feed
	for w := range c.watches {
		w.mu.Lock()
		out = append(out, w.st)
		w.mu.Unlock()
		feeds = append(feeds, w.feed)
	}
	c.mu.Unlock()
	for i, f := range feeds {
		if f != nil {
			f.overlay(&out[i])
		}
	}
	// Key each entry once: a comparator that builds keys costs n·log n of them.
	keys := make([]string, len(out))
	order := make([]int, len(out))
	for i, st := range out {
		order[i] = i
		switch {
		case st.Catalog != nil:
			keys[i] = "\x00" + st.Catalog.key() // catalog watches first
		case st.Connect != nil:
			keys[i] = "\x02" + st.Connect.Endpoint()
		default:
			keys[i] = "\x01" + st.Query.Key()
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(keys[a], keys[b]) })
	sorted := make([]WatchStatus, len(out))
	for i, j := range order {
		sorted[i] = out[j]
	}
	return sorted
}

// Watch runs a blocking-query loop on /v1/health/service/<q.Service> (with
// q.Connect: /v1/health/connect/<q.Service>) until ctx is done, then returns ctx.Err(). It returns another error only for an
// invalid query or a nil emit, before contacting Consul.
//
// emit receives the full usable instance set and the instances the health
// policy leaves out: first after the first successful query (even if
// empty), then only when either changed in content (any field of any
// instance; for an excluded one its status and failing checks), whatever
// the index says. Failed queries never
// emit; they are logged, counted and retried with jittered exponential backoff
// (MinBackoff..MaxBackoff), forever. emit is called from the calling
// goroutine, must be cheap and must not modify the snapshot.
//
// Right after an outage or an index reset, an empty answer is held for
// Config.ResyncGrace while the last set is not empty: see runWatch.
func (c *Client) Watch(ctx context.Context, q Query, emit func(Snapshot)) error {
	return c.WatchFrom(ctx, q, nil, emit)
}

// WatchFrom is [Client.Watch] for a watch that takes over from another one of
// the same query, e.g. on a new Client after the Consul settings changed:
// last is what the old watch emitted last (nil: nothing). The first answer is
// then a resync against last, so an empty answer is held as after an outage,
// and what is emitted first is last itself when it is.
func (c *Client) WatchFrom(ctx context.Context, q Query, last *Snapshot, emit func(Snapshot)) error {
	q, err := q.normalize()
	if err != nil {
		return err
	}
	if emit == nil {
		return errors.New("discovery: watch " + q.Service + ": emit is nil")
	}
	w := &watchState{st: WatchStatus{Query: q}}
	endpoint := q.endpoint()
	fetch := func(ctx context.Context, index uint64, wait time.Duration) (healthResult, uint64, error) {
		return c.fetch(ctx, c.api, q, endpoint, index, wait, q.Service)
	}
	if c.cfg.ChangeFeed && !q.Connect { // see Query.Connect
		f := c.acquireFeed(scopeOf(q))
		defer c.releaseFeed(f)
		sub := f.subscribe(q.Service, q.Tags)
		defer f.unsubscribe(sub)
		w.feed = f
		fetch = func(ctx context.Context, index uint64, wait time.Duration) (healthResult, uint64, error) {
			return c.fetchMoved(ctx, q, endpoint, f, sub, index, wait)
		}
	}
	defer c.track(w)()
	var seed *healthResult
	if last != nil {
		seed = &healthResult{ins: last.Instances, excl: last.Excluded}
	}
	return runWatch(ctx, c, w, watchSpec[healthResult]{
		seed:     seed,
		label:    q.Service,
		endpoint: endpoint,
		noun:     "instances",
		quiet:    w.feed != nil,
		log:      c.cfg.Logger.With("service", q.Service, "query", q.Key()),
		fetch:    fetch,
		same:     sameHealth,
		fresh:    func(r healthResult) bool { return r.patched },
		seen:     func(r healthResult) uint64 { return r.at },
		size:     func(r healthResult) int { return len(r.ins) },
		// Only an empty answer is held: a partial set (anti-entropy
		// registers one instance at a time) still serves, and any usable
		// instance shows Consul has its state back.
		merge: func(base, result healthResult) (healthResult, bool) {
			if len(result.ins) == 0 && len(base.ins) > 0 {
				return base, true
			}
			return result, false
		},
		settles: func(result healthResult) bool { return len(result.ins) > 0 },
		emit: func(r healthResult, index uint64, at time.Time) {
			c.metrics.instances(q.Service, len(r.ins))
			emit(Snapshot{Query: q, Instances: r.ins, Excluded: r.excl, Index: index, Time: at})
		},
	})
}

// track lists w in Status until the returned function is called.
func (c *Client) track(w *watchState) (untrack func()) {
	c.mu.Lock()
	c.watches[w] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.watches, w)
		c.mu.Unlock()
	}
}

// succeeded records a successful reply in the status and metrics.
func (c *Client) succeeded(service string, w *watchState, index uint64, at time.Time) {
	w.update(func(s *WatchStatus) { s.LastSuccess, s.LastError, s.LastErrorReason, s.LastIndex = at, "", "", index })
	c.metrics.success(service, at)
}

// endpoint is the health endpoint q reads: /v1/health/service/<name>, or
// /v1/health/connect/<name> for a Connect query.
func (q Query) endpoint() string {
	if q.Connect {
		return "/v1/health/connect/" + url.PathEscape(q.Service)
	}
	return "/v1/health/service/" + url.PathEscape(q.Service)
}

// fetch performs one blocking query of the health endpoint at index and
// returns the usable instances of q and the reply's X-Consul-Index. Errors are
// *queryError. Every instance is asked for (no ?passing) and the policy is
// applied in code: node checks and maintenance count the same way for both
// policies, and the instances left out are reported (Snapshot.Excluded).
//
// durationLabel is the "service" label of the query's duration summary: the
// service for a watch's own blocking query, FeedRereadLabel for the change
// feed's re-reads (a summary per service would keep about 70 KB of quantile
// streams for each of thousands of services).
func (c *Client) fetch(ctx context.Context, a *api.Client, q Query, endpoint string, index uint64, wait time.Duration, durationLabel string) (_ healthResult, _ uint64, err error) {
	opts := (&api.QueryOptions{
		Datacenter: q.Datacenter,
		Namespace:  q.Namespace,
		Partition:  q.Partition,
		AllowStale: c.cfg.Stale,
		WaitIndex:  index,
		WaitTime:   wait,
	}).WithContext(ctx)
	start := time.Now()
	defer func() { c.metrics.queryDone(durationLabel, start, err) }()
	var entries []*api.ServiceEntry
	var meta *api.QueryMeta
	if q.Connect {
		entries, meta, err = a.Health().ConnectMultipleTags(q.Service, q.Tags, false, opts)
	} else {
		entries, meta, err = a.Health().ServiceMultipleTags(q.Service, q.Tags, false, opts)
	}
	if err != nil {
		return healthResult{}, 0, classify(endpoint, unwrapURL(err))
	}
	if meta.ResultsFilteredByACLs && len(entries) == 0 {
		return healthResult{}, 0, classify(endpoint, errACLFiltered)
	}
	if c.cfg.Stale {
		// How far behind the leader the answering server was
		// (X-Consul-LastContact; 0 from the leader itself).
		c.metrics.lastContact(q.Service, meta.LastContact)
	}
	kept := compact(q, entries)
	r := judge(q, kept, nil)
	r.kept = kept
	return r, meta.LastIndex, nil
}

// healthResult is one answer of the health endpoint: the instances the
// query admits and the ones it leaves out.
type healthResult struct {
	ins  []Instance
	excl []Excluded
	// kept is what a read returned, for the change feed's patches; nil for a
	// patched result.
	kept []keptEntry
	// patched: the change feed's check statuses were applied to the last
	// read (feedSub.patched); the result carries that read's index.
	patched bool
	// at is the raft index of the newest patch applied (0: none).
	at uint64
}

func sameHealth(a, b healthResult) bool {
	return sameInstances(a.ins, b.ins) && slices.EqualFunc(a.excl, b.excl, Excluded.equal)
}

// unwrapURL drops the *url.Error wrapper (method and full URL) around
// transport errors: the error names the endpoint itself. The inner error keeps
// its Timeout() bit for classify.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

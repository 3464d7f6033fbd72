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
	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
)

// WatchStatus describes one running watch, for readiness reporting.
type WatchStatus struct {
	// Query is the service query of a [Client.Watch]; zero for a catalog
	// watch.
	Query Query
	// Catalog is set for a [Client.WatchCatalog] instead of Query.
	Catalog *CatalogQuery
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
}

// watchState is the mutable status of one Watch call.
type watchState struct {
	mu sync.Mutex
	st WatchStatus
}

func (w *watchState) update(f func(*WatchStatus)) {
	w.mu.Lock()
	f(&w.st)
	w.mu.Unlock()
}

// Status returns the status of every running watch: catalog watches first,
// then service watches sorted by Query.Key(). Watches that returned are not
// listed.
func (c *Client) Status() []WatchStatus {
	c.mu.Lock()
	out := make([]WatchStatus, 0, len(c.watches))
	for w := range c.watches {
		w.mu.Lock()
		out = append(out, w.st)
		w.mu.Unlock()
	}
	c.mu.Unlock()
	slices.SortStableFunc(out, func(a, b WatchStatus) int {
		if (a.Catalog != nil) != (b.Catalog != nil) {
			if a.Catalog != nil {
				return -1
			}
			return 1
		}
		if a.Catalog != nil {
			return cmp.Compare(a.Catalog.key(), b.Catalog.key())
		}
		return cmp.Compare(a.Query.Key(), b.Query.Key())
	})
	return out
}

// Watch runs a blocking-query loop on /v1/health/service/<q.Service> until ctx
// is done, then returns ctx.Err(). It returns another error only for an
// invalid query or a nil emit, before contacting Consul.
//
// emit receives the full usable instance set: first after the first
// successful query (even if empty), then only when the set changed in content
// (any field of any instance), whatever the index says. Failed queries never
// emit; they are logged, counted and retried with jittered exponential backoff
// (MinBackoff..MaxBackoff), forever. emit is called from the calling
// goroutine, must be cheap and must not modify the snapshot.
func (c *Client) Watch(ctx context.Context, q Query, emit func(Snapshot)) error {
	q, err := q.normalize()
	if err != nil {
		return err
	}
	if emit == nil {
		return errors.New("discovery: watch " + q.Service + ": emit is nil")
	}
	w := &watchState{st: WatchStatus{Query: q}}
	defer c.track(w)()
	endpoint := "/v1/health/service/" + url.PathEscape(q.Service)
	return runWatch(ctx, c, w, watchSpec[[]Instance]{
		label:    q.Service,
		endpoint: endpoint,
		noun:     "instances",
		log:      c.cfg.Logger.With("service", q.Service, "query", q.Key()),
		fetch: func(ctx context.Context, index uint64, wait time.Duration) ([]Instance, uint64, error) {
			return c.fetch(ctx, q, endpoint, index, wait)
		},
		same: sameInstances,
		size: func(ins []Instance) int { return len(ins) },
		emit: func(ins []Instance, index uint64, at time.Time) {
			c.metrics.instances(q.Service, len(ins))
			emit(Snapshot{Query: q, Instances: ins, Index: index, Time: at})
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

// watchSpec is what differs between watches: the endpoint, how one query is
// made, how results compare and what is emitted. runWatch supplies the rest.
type watchSpec[T any] struct {
	// label is the metrics "service" label of the watch.
	label string
	// endpoint names the Consul endpoint in logs and errors.
	endpoint string
	// noun names the results in log messages ("instances", "services").
	noun  string
	log   hclog.Logger
	fetch fetchFunc[T]
	// same reports whether two results have the same content.
	same func(a, b T) bool
	// size is the number of entries of a result, for the status and logs.
	size func(T) int
	// emit receives a result that differs from the last emitted one (and
	// the first one).
	emit func(result T, index uint64, at time.Time)
}

// runWatch drives spec with the generic blocking loop, owning everything
// watches have in common: content comparison before emitting, the status,
// the metrics, the logs of failures and recoveries, backoff, and the resync
// grace.
//
// Resync grace: right after an outage or an index reset, Consul may be
// refilling a lost state (a restarted dev agent or server with its services
// not yet synced by anti-entropy). An answer that would empty a non-empty set
// within Config.ResyncGrace of that moment is held: the last set stays, the
// watch keeps querying (its wait bounded by the grace left) and emits the
// first non-empty answer, or the empty one once it still holds when the grace
// is over.
func runWatch[T any](ctx context.Context, c *Client, w *watchState, spec watchSpec[T]) error {
	log, endpoint := spec.log, spec.endpoint
	var last T
	emitted := false
	failures := 0 // consecutive, for the recovery log line
	var resyncUntil time.Time
	var held *T // an empty answer held back during the resync grace
	recovered := func(index uint64) {
		if failures > 0 {
			log.Info("consul query succeeded again", "endpoint", endpoint, "failures", failures, "index", index)
			failures = 0
		}
	}
	apply := func(result T, index uint64, now time.Time) {
		held = nil
		if emitted && spec.same(last, result) {
			return
		}
		n := spec.size(result)
		if !emitted {
			log.Info("synced", spec.noun, n, "index", index)
		} else {
			log.Debug(spec.noun+" changed", spec.noun, n, "index", index)
		}
		last, emitted = result, true
		w.update(func(s *WatchStatus) { s.Synced, s.Instances = true, n })
		spec.emit(result, index, now)
	}
	// expire applies a held empty answer once the grace is over.
	expire := func(index uint64, now time.Time) {
		if held != nil && !now.Before(resyncUntil) {
			log.Warn("consul still reports no "+spec.noun+" after the resync grace; applying it",
				"endpoint", endpoint, "index", index, "resync_grace", c.cfg.ResyncGrace)
			apply(*held, index, now)
		}
	}
	loop := &blockingLoop[T]{
		fetch:   spec.fetch,
		limiter: rate.NewLimiter(rate.Limit(c.cfg.Rate), c.cfg.Burst),
		backoff: backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff},
		wait: func() time.Duration {
			if held != nil {
				// Wake up when the grace ends, to apply what is held.
				return min(c.cfg.Wait, max(time.Until(resyncUntil), 10*time.Millisecond))
			}
			return c.cfg.Wait
		},
		changed: func(result T, index uint64, resync bool) {
			now := time.Now()
			recovered(index)
			c.succeeded(spec.label, w, index, now)
			if resync && c.cfg.ResyncGrace > 0 {
				resyncUntil = now.Add(c.cfg.ResyncGrace)
			}
			if emitted && spec.size(last) > 0 && spec.size(result) == 0 && now.Before(resyncUntil) {
				if held == nil {
					log.Warn("consul reports no "+spec.noun+" right after an outage or index reset; keeping the last known ones during the resync grace",
						"endpoint", endpoint, "index", index, "resync_grace", c.cfg.ResyncGrace, spec.noun, spec.size(last))
					c.metrics.resyncHeld(spec.label)
				}
				held = &result
				return
			}
			apply(result, index, now)
		},
		unchanged: func(index uint64) {
			now := time.Now()
			recovered(index)
			c.succeeded(spec.label, w, index, now)
			expire(index, now)
		},
		reset: func(sent, got uint64) {
			log.Debug("blocking index went backwards or was 0; resetting", "endpoint", endpoint, "sent", sent, "got", got)
			c.metrics.indexReset(spec.label)
		},
		failed: func(err error, attempt int, retryIn time.Duration) {
			var qe *queryError
			if !errors.As(err, &qe) {
				qe = classify(endpoint, err)
			}
			log.Warn("consul query failed; keeping the last known "+spec.noun,
				"endpoint", qe.endpoint, "status", qe.status, "reason", qe.reason,
				"error", qe.err, "attempt", attempt, "retry_in", retryIn)
			failures = attempt
			c.metrics.queryError(spec.label, qe.reason)
			w.update(func(s *WatchStatus) { s.LastError, s.LastErrorReason = qe.Error(), qe.reason })
		},
	}
	return loop.run(ctx)
}

// succeeded records a successful reply in the status and metrics.
func (c *Client) succeeded(service string, w *watchState, index uint64, at time.Time) {
	w.update(func(s *WatchStatus) { s.LastSuccess, s.LastError, s.LastErrorReason, s.LastIndex = at, "", "", index })
	c.metrics.success(service, at)
}

// fetch performs one blocking query of the health endpoint at index and
// returns the usable instances of q and the reply's X-Consul-Index. Errors are
// *queryError. With the passing policy Consul filters server-side (?passing);
// the policy is applied again in code so node checks and maintenance count
// the same way for both policies.
func (c *Client) fetch(ctx context.Context, q Query, endpoint string, index uint64, wait time.Duration) (_ []Instance, _ uint64, err error) {
	opts := (&api.QueryOptions{
		Datacenter: q.Datacenter,
		Namespace:  q.Namespace,
		Partition:  q.Partition,
		AllowStale: c.cfg.Stale,
		WaitIndex:  index,
		WaitTime:   wait,
	}).WithContext(ctx)
	start := time.Now()
	defer func() { c.metrics.queryDone(q.Service, start, err) }()
	entries, meta, err := c.api.Health().ServiceMultipleTags(q.Service, q.Tags, q.Health == HealthPassing, opts)
	if err != nil {
		return nil, 0, classify(endpoint, unwrapURL(err))
	}
	if meta.ResultsFilteredByACLs && len(entries) == 0 {
		return nil, 0, classify(endpoint, errACLFiltered)
	}
	if c.cfg.Stale {
		// How far behind the leader the answering server was
		// (X-Consul-LastContact; 0 from the leader itself).
		c.metrics.lastContact(q.Service, meta.LastContact)
	}
	return instances(q, entries), meta.LastIndex, nil
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

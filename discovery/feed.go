package discovery

// The change feed (Config.ChangeFeed): every service watch of one scope
// (datacenter, namespace, partition) shares three blocking queries instead of
// holding one of its own, so the connections to the Consul agent stay a small
// fixed number whatever the number of services (Consul's default
// limits.http_max_conns_per_client is 200, counted per client address).
//
//   - /v1/health/state/critical and /v1/health/state/warning: the checks that
//     are not passing. Consul reads them through its index on check status
//     and wakes each query only when a check enters, leaves or changes in that
//     status, so an answer costs Consul in proportion to the failing checks,
//     not to every check of the datacenter (a filter on /v1/health/state/any
//     passes over all of them on every check write: 5 ms of Consul CPU per
//     answer at 10,000 checks, against 0.2 ms). A check that appears, leaves
//     (passing again, or deregistered) or changes name, service or tags moves
//     its service (a node check moves every service watched on that node).
//   - /v1/catalog/services: its index moves on every service registration
//     change. Services that appear, leave or change tags move at once. A move
//     whose raft index a checks query also saw written (a registration that
//     came with a check that is not passing) moves the services of those
//     checks; any other move (an instance registered passing or without
//     checks, a changed address, port or meta) is found by a sweep: one
//     /v1/catalog/nodes and one /v1/catalog/node-services/<node> per node,
//     compared with what each watch read last (an instance whose ModifyIndex
//     is above the watch's X-Consul-Index, or one it knows that is gone).
//     A sweep also runs once per wait period, so nothing can stay missed
//     for longer.
//
// A moved service's watches re-read /v1/health/service/<name> with index=
// (a blocking query that Consul answers at once, since the service's index
// moved), through at most maxReads concurrent requests per Client. Consul
// bumps a service's index on every write to its instances and checks (its
// state store's per-service index), which is what makes the re-read sound.
//
// While the feed fails, the watches keep their last set and send nothing:
// their status carries the feed's error. Once it recovers, each reads its
// service afresh (index 0), as after a failure of its own: content is
// compared, the resync grace applies, and a Consul that lost its state is
// noticed even when its new indexes happen to equal the old ones.

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
)

// Feed endpoints, also the "service" label of the feed's metrics.
const (
	feedCatalogEndpoint = "/v1/catalog/services"
	feedStateEndpoint   = "/v1/health/state/" // + a status of feedStates
)

// feedStates are the check statuses the feed follows, one query each.
var feedStates = [...]string{api.HealthCritical, api.HealthWarning}

const (
	// maxReads bounds the concurrent re-reads and sweep requests of a Client:
	// with the three feed queries, a catalog watch and a registration, the
	// agent holds at most 8 connections to its Consul agent.
	maxReads = 3
	// rereadWait is the blocking wait of a re-read: the service's index has
	// moved, so Consul answers at once; the bound is what a move that was
	// not one costs a read slot (a server behind, with stale reads, is
	// read again: feedSub.want).
	rereadWait = 100 * time.Millisecond
	// attributeWait is how long a catalog move waits for a checks query to
	// report a failing check written at its index before it sweeps. Both
	// queries wake on the same raft commit, so their answers come within
	// milliseconds of each other; a checks answer later than this costs a
	// sweep, and still moves its services when it comes.
	attributeWait = 100 * time.Millisecond
	// touchedKeep bounds the raft indexes remembered for attribution.
	touchedKeep = 256
	// feedRate is the rate (per second, and burst) of each feed query: it
	// answers for every service, so it may be faster than one watch.
	feedRate = 50
)

// feedScope is what one feed covers.
type feedScope struct{ datacenter, namespace, partition string }

func scopeOf(q Query) feedScope { return feedScope{q.Datacenter, q.Namespace, q.Partition} }

// logArgs are the scope's log fields: only those set (none for the agent's
// own datacenter, namespace and partition).
func (s feedScope) logArgs() []any {
	var args []any
	for _, kv := range [][2]string{{"dc", s.datacenter}, {"ns", s.namespace}, {"partition", s.partition}} {
		if kv[1] != "" {
			args = append(args, kv[0], kv[1])
		}
	}
	return args
}

// checkKey identifies a check: node and check ID.
type checkKey struct{ node, id string }

// checkInfo is what the feed compares of a check.
type checkInfo struct {
	service, serviceID, status, name, tags string
	create, modify                         uint64
}

func (a checkInfo) same(b checkInfo) bool {
	return a.service == b.service && a.serviceID == b.serviceID && a.status == b.status && a.name == b.name && a.tags == b.tags
}

// feed is the change feed of one scope. Its loops run while a watch uses it.
type feed struct {
	c      *Client
	scope  feedScope
	log    hclog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	refs   int // guarded by c.mu

	checksSt   [len(feedStates)]watchState
	catalogSt  watchState
	sweepMu    sync.Mutex // one sweep at a time
	lastSweep  time.Time  // the end of the last sweep that succeeded; guarded by sweepMu
	sweepStart time.Time  // the start of the last sweep; guarded by sweepMu
	sweepCost  int        // the requests of the last sweep; guarded by sweepMu

	mu        sync.Mutex // guards what follows; taken before a feedSub's mu
	subs      map[string]map[*feedSub]struct{}
	checks    [len(feedStates)]map[checkKey]checkInfo // per status; nil before its first answer
	checksIdx [len(feedStates)]uint64
	advanced  chan struct{}       // closed and replaced on every checks answer
	touched   map[uint64][]string // raft index → services whose checks were written at it
	services  map[string][]string // the last catalog answer; nil before the first
	// failing: the queries whose last try failed. While any does, broke is
	// closed (healed open); once none does, healed is closed.
	failing       map[string]*queryError
	broke, healed chan struct{}
}

// feedDown is the error a watch's fetch returns when the feed fails: the
// watch's loop then reads afresh (index 0) once the feed has recovered, as
// after a failure of its own, so it compares content and notices a Consul
// that lost its state (whose new indexes may equal the old ones).
type feedDown struct{ err *queryError }

// feedErrPrefix starts the error of a watch that the feed's failure fails.
const feedErrPrefix = "change feed: "

func (e *feedDown) Error() string { return feedErrPrefix + e.err.Error() }
func (e *feedDown) Unwrap() error { return e.err }

// setFailing records the outcome of a feed query's try.
func (f *feed) setFailing(endpoint string, qe *queryError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	was := len(f.failing) > 0
	if qe != nil {
		f.failing[endpoint] = qe
	} else {
		delete(f.failing, endpoint)
	}
	switch now := len(f.failing) > 0; {
	case now && !was:
		close(f.broke)
		f.healed = make(chan struct{})
	case !now && was:
		close(f.healed)
		f.broke = make(chan struct{})
	}
}

// state returns the channel closed when the feed breaks and the one closed
// when it heals (one of them is closed already), and its current error.
func (f *feed) state() (broke, healed <-chan struct{}, err *queryError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, qe := range f.failing {
		err = qe
		break
	}
	return f.broke, f.healed, err
}

// acquireFeed returns the running feed of scope, starting it, with one more
// reference; release it with releaseFeed.
func (c *Client) acquireFeed(scope feedScope) *feed {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.feeds[scope]
	if f == nil {
		ctx, cancel := context.WithCancel(context.Background())
		f = &feed{c: c, scope: scope, cancel: cancel, done: make(chan struct{}),
			log:  c.cfg.Logger.Named("feed").With(scope.logArgs()...),
			subs: map[string]map[*feedSub]struct{}{}, advanced: make(chan struct{}), touched: map[uint64][]string{},
			failing: map[string]*queryError{}, broke: make(chan struct{}), healed: make(chan struct{})}
		close(f.healed)
		c.feeds[scope] = f
		go f.run(ctx)
	}
	f.refs++
	return f
}

// releaseFeed drops a reference; the last one stops the feed.
func (c *Client) releaseFeed(f *feed) {
	c.mu.Lock()
	f.refs--
	last := f.refs == 0
	if last {
		delete(c.feeds, f.scope)
	}
	c.mu.Unlock()
	if last {
		f.cancel()
		<-f.done
	}
}

func (f *feed) subscribe(service string, tags []string) *feedSub {
	s := &feedSub{service: service, tags: tags, moved: make(chan struct{}, 1)}
	f.mu.Lock()
	if f.subs[service] == nil {
		f.subs[service] = map[*feedSub]struct{}{}
	}
	f.subs[service][s] = struct{}{}
	f.mu.Unlock()
	return s
}

func (f *feed) unsubscribe(s *feedSub) {
	f.mu.Lock()
	delete(f.subs[s.service], s)
	if len(f.subs[s.service]) == 0 {
		delete(f.subs, s.service)
	}
	f.mu.Unlock()
}

// queries returns the state of each feed query, the checks queries first.
func (f *feed) queries() []*watchState {
	out := make([]*watchState, 0, len(f.checksSt)+1)
	for i := range f.checksSt {
		out = append(out, &f.checksSt[i])
	}
	return append(out, &f.catalogSt)
}

// healthy returns when the feed last confirmed what it watches (the oldest of
// its queries' last successes; zero before all answered) and the error of
// the first query whose last try failed ("" when none did).
func (f *feed) healthy() (since time.Time, err, reason string) {
	for i, q := range f.queries() {
		q.mu.Lock()
		st := q.st
		q.mu.Unlock()
		if i == 0 || st.LastSuccess.Before(since) {
			since = st.LastSuccess
		}
		if st.LastError != "" && err == "" {
			err, reason = feedErrPrefix+st.LastError, st.LastErrorReason
		}
	}
	return since, err, reason
}

// overlay applies the feed's state to the status of one of its watches: it
// shares the feed's failure, and, while its own reads succeed (or fail only
// because the feed does), it is as fresh as the feed's last success, so a
// feed outage makes all its watches stale at the same moment.
func (f *feed) overlay(st *WatchStatus) {
	since, err, reason := f.healthy()
	if err != "" && st.LastError == "" {
		st.LastError, st.LastErrorReason = err, reason
	}
	st.FeedError = strings.HasPrefix(st.LastError, feedErrPrefix)
	if err != "" && st.LastSuccess.After(since) {
		// While the feed fails nothing it covers is confirmed: a watch whose
		// wait expired since (answered without asking Consul) is no fresher.
		st.LastSuccess = since
	}
	if st.Synced && (st.LastError == "" || st.FeedError) && since.After(st.LastSuccess) {
		st.LastSuccess = since
	}
}

// run drives the feed queries until ctx is done.
func (f *feed) run(ctx context.Context) {
	defer close(f.done)
	var wg sync.WaitGroup
	for i, state := range feedStates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fetch := func(ctx context.Context, index uint64, wait time.Duration) (map[checkKey]checkInfo, uint64, error) {
				return f.fetchChecks(ctx, state, index, wait)
			}
			changed := func(_ context.Context, now map[checkKey]checkInfo, index uint64, _ bool) { f.onChecks(i, now, index) }
			loopFeed(ctx, f, &f.checksSt[i], feedStateEndpoint+state, fetch, changed, nil)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		loopFeed(ctx, f, &f.catalogSt, feedCatalogEndpoint, f.fetchServices, f.onServices, f.onIdle)
	}()
	wg.Wait()
}

// loopFeed runs one feed query with the blocking loop's index rules, backoff
// and rate limit; on answers it calls changed, on a wait that expired
// unchanged (when set).
func loopFeed[T any](ctx context.Context, f *feed, st *watchState, endpoint string,
	fetch fetchFunc[T], changed func(ctx context.Context, r T, index uint64, resync bool), unchanged func(ctx context.Context)) {
	label := "feed:" + endpoint
	c := f.c
	ok := func(index uint64) {
		f.setFailing(endpoint, nil)
		st.update(func(s *WatchStatus) {
			s.Synced, s.LastSuccess, s.LastError, s.LastErrorReason, s.LastIndex = true, time.Now(), "", "", index
		})
		c.metrics.success(label, time.Now())
	}
	failures := 0
	l := &blockingLoop[T]{
		fetch:   fetch,
		limiter: rate.NewLimiter(feedRate, feedRate),
		backoff: backoff{min: c.cfg.MinBackoff, max: c.cfg.MaxBackoff},
		wait:    func() time.Duration { return c.cfg.Wait },
		changed: func(r T, index uint64, resync bool) {
			if failures > 0 {
				f.log.Info("consul query succeeded again", "endpoint", endpoint, "failures", failures, "index", index)
				failures = 0
			}
			ok(index)
			changed(ctx, r, index, resync)
		},
		unchanged: func(index uint64) {
			ok(index)
			if unchanged != nil {
				unchanged(ctx)
			}
		},
		reset: func(sent, got uint64) {
			c.metrics.indexReset(label)
			if sent > 0 && got < sent {
				// A new Raft history (a restarted dev agent, a restore): what
				// the watches read says nothing of it, so all read again.
				f.moveAll()
			}
		},
		failed: func(err error, attempt int, retryIn time.Duration) {
			var qe *queryError
			if !errors.As(err, &qe) {
				qe = classify(endpoint, err)
			}
			qe.hint = c.hint(qe)
			// The message of a watch's own failure: operators grep for it.
			args := []any{"endpoint", endpoint, "status", qe.status, "reason", qe.reason, "error", qe.err, "attempt", attempt, "retry_in", retryIn}
			if qe.hint != "" {
				args = append(args, "hint", qe.hint)
			}
			f.log.Warn("consul query failed; keeping the last known instances", args...)
			if qe.status == http.StatusTooManyRequests {
				// Consul's connection limit (limits.http_max_conns_per_client)
				// refused the feed's connection: free the idle re-read
				// connections it counts, or the feed cannot get back until
				// they time out, and the watches wait for the feed.
				c.readHTTP.CloseIdleConnections()
			}
			failures = attempt
			c.metrics.queryError(label, qe.reason)
			st.update(func(s *WatchStatus) { s.LastError, s.LastErrorReason = qe.Error(), qe.reason })
			f.setFailing(endpoint, qe)
		},
	}
	_ = l.run(ctx)
}

func (f *feed) opts(ctx context.Context, index uint64, wait time.Duration) *api.QueryOptions {
	return (&api.QueryOptions{
		Datacenter: f.scope.datacenter, Namespace: f.scope.namespace, Partition: f.scope.partition,
		AllowStale: f.c.cfg.Stale, WaitIndex: index, WaitTime: wait,
	}).WithContext(ctx)
}

// fetchChecks reads the checks in state (critical or warning).
func (f *feed) fetchChecks(ctx context.Context, state string, index uint64, wait time.Duration) (_ map[checkKey]checkInfo, _ uint64, err error) {
	endpoint := feedStateEndpoint + state
	start := time.Now()
	defer func() { f.c.metrics.queryDone("feed:"+endpoint, start, err) }()
	checks, meta, err := f.c.api.Health().State(state, f.opts(ctx, index, wait))
	if err != nil {
		return nil, 0, classify(endpoint, unwrapURL(err))
	}
	out := make(map[checkKey]checkInfo, len(checks))
	for _, ch := range checks {
		if ch == nil {
			continue
		}
		out[checkKey{ch.Node, ch.CheckID}] = checkInfo{service: ch.ServiceName, serviceID: ch.ServiceID, status: ch.Status,
			name: ch.Name, tags: strings.Join(ch.ServiceTags, "\x00"), create: ch.CreateIndex, modify: ch.ModifyIndex}
	}
	return out, meta.LastIndex, nil
}

// fetchServices reads the catalog's service names and tags.
func (f *feed) fetchServices(ctx context.Context, index uint64, wait time.Duration) (_ map[string][]string, _ uint64, err error) {
	start := time.Now()
	defer func() { f.c.metrics.queryDone("feed:"+feedCatalogEndpoint, start, err) }()
	services, meta, err := f.c.api.Catalog().Services(f.opts(ctx, index, wait))
	if err != nil {
		return nil, 0, classify(feedCatalogEndpoint, unwrapURL(err))
	}
	if meta.ResultsFilteredByACLs && len(services) == 0 {
		return nil, 0, classify(feedCatalogEndpoint, errACLFiltered)
	}
	for name, tags := range services {
		slices.Sort(tags)
		services[name] = slices.Compact(tags)
	}
	return services, meta.LastIndex, nil
}

// moveAll moves every watch.
func (f *feed) moveAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, subs := range f.subs {
		for s := range subs {
			s.signal(0)
		}
	}
}

// signalLocked moves every watch of service. f.mu is held.
func (f *feed) signalLocked(service string, want uint64) {
	for s := range f.subs[service] {
		s.signal(want)
	}
}

// onServices handles a catalog answer: services that appeared, left or
// changed tags move at once; the rest of the move is attributed to the checks
// written at its index, or found by a sweep.
func (f *feed) onServices(ctx context.Context, now map[string][]string, index uint64, resync bool) {
	f.mu.Lock()
	old := f.services
	f.services = now
	if old == nil {
		// One line for every watch of the scope, which log their syncs at debug.
		f.log.Info("following consul through the change feed", "catalog_services", len(now), "index", index)
	} else {
		for name, tags := range now {
			if o, ok := old[name]; !ok || !slices.Equal(o, tags) {
				f.signalLocked(name, 0)
			}
		}
		for name := range old {
			if _, ok := now[name]; !ok {
				f.signalLocked(name, 0)
			}
		}
	}
	f.mu.Unlock()
	if old == nil || resync {
		// The baseline, or the first answer after a failure: every watch
		// reads afresh after a feed failure (feedDown).
		return
	}
	if services, ok := f.attribute(ctx, index); ok {
		f.mu.Lock()
		for _, s := range services {
			f.signalLocked(s, index)
		}
		f.mu.Unlock()
		return
	}
	f.sweep(ctx, "a registration change without a failing check")
}

// attribute waits (at most attributeWait) for a checks query to report
// checks written at index and returns their services. It gives up at once
// when every checks query has answered at index or later without any.
func (f *feed) attribute(ctx context.Context, index uint64) ([]string, bool) {
	t := time.NewTimer(attributeWait)
	defer t.Stop()
	for {
		f.mu.Lock()
		at, adv := slices.Min(f.checksIdx[:]), f.advanced
		services, ok := f.touched[index]
		f.mu.Unlock()
		if ok || at >= index {
			return services, ok
		}
		select {
		case <-adv:
		case <-t.C:
			return nil, false
		case <-ctx.Done():
			return nil, false
		}
	}
}

// onIdle runs when the catalog query's wait expired: the periodic sweep.
func (f *feed) onIdle(ctx context.Context) {
	f.sweepMu.Lock()
	due := time.Since(f.lastSweep) >= f.c.cfg.Wait
	f.sweepMu.Unlock()
	if due {
		f.sweep(ctx, "periodic")
	}
}

// FeedStatus is the state of one change-feed query (Config.ChangeFeed), for
// the status page.
type FeedStatus struct {
	// Endpoint is the query: "/v1/health/state/critical",
	// "/v1/health/state/warning" or "/v1/catalog/services".
	Endpoint string
	// Datacenter, Namespace and Partition are the feed's scope; empty means
	// the agent's own.
	Datacenter, Namespace, Partition string
	// Status is the query's state; its Query and Catalog are zero.
	Status WatchStatus
	// Services is the number of services watched through the feed.
	Services int
}

// Feeds returns the state of every running change-feed query, sorted by
// scope, the checks queries first.
func (c *Client) Feeds() []FeedStatus {
	c.mu.Lock()
	feeds := slices.Collect(maps.Values(c.feeds))
	c.mu.Unlock()
	slices.SortFunc(feeds, func(a, b *feed) int {
		return strings.Compare(a.scope.datacenter+"\x00"+a.scope.namespace+"\x00"+a.scope.partition,
			b.scope.datacenter+"\x00"+b.scope.namespace+"\x00"+b.scope.partition)
	})
	var out []FeedStatus
	for _, f := range feeds {
		f.mu.Lock()
		n := len(f.subs)
		f.mu.Unlock()
		for i, q := range f.queries() {
			endpoint := feedCatalogEndpoint
			if i < len(feedStates) {
				endpoint = feedStateEndpoint + feedStates[i]
			}
			q.mu.Lock()
			st := q.st
			q.mu.Unlock()
			out = append(out, FeedStatus{Endpoint: endpoint, Datacenter: f.scope.datacenter, Namespace: f.scope.namespace,
				Partition: f.scope.partition, Status: st, Services: n})
		}
	}
	return out
}

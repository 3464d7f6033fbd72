// Package gateway is impulse-agent's dataplane: the one request pipeline
// every ingress hands its requests to (handler.go: validate → route →
// admit → attempts → record) and the wiring of its parts: the listeners
// (gateway/ingress), tunnels (gateway/tunnel), the backend request and
// response rules (gateway/wire), the client's body (gateway/reqbody), the
// observers of every request's Outcome (gateway/observe), the retry state
// (gateway/retry), the route table and the upstreams with their backends.
// It knows nothing of Consul or HCL; the agent converts those into Config
// and membership updates.
package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/concurrency"
	"github.com/impulse-agent/impulse-agent/gateway/ingress"
	"github.com/impulse-agent/impulse-agent/gateway/mesh"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// table is one immutable generation of routing state.
type table struct {
	generation uint64
	routes     *route.Table[*upstream.Upstream]
	upstreams  map[string]*upstream.Upstream
	configs    map[string]*UpstreamConfig // see config
	rates      rateLimiters               // by upstream name (ratelimits.go)
	// limiters count every upstream's requests in flight against its
	// MaxRequests (by name); a limiter outlives reloads of its upstream.
	limiters map[string]*concurrency.Limiter
	attempts map[*upstream.Upstream]*retry.Settings
	auth     authPolicies // routes with authentication (authn.go)
	edge     edgePolicies // routes with cors or compress (edge.go)
}

// Gateway is the running dataplane. Create it with New, start listeners with
// Start, feed it with Apply and SetDiscovered, stop it with Shutdown.
type Gateway struct {
	log   hclog.Logger
	qlog  *slog.Logger
	obs   observe.Observers // every request's Outcome goes to them (recorder.go)
	table atomic.Pointer[table]
	paths atomic.Pointer[pathnorm.PathOptions]

	mu        sync.Mutex // serializes Apply, SetDiscovered, Start and Shutdown
	listeners map[string]*ingress.Listener
	draining  []*ingress.Listener // taken by Shutdown; Close still reaches them
	shutdown  bool
	// retired are upstreams a reload replaced or removed, kept while their
	// backends still drain requests, for Backends.
	retired []*upstream.Upstream

	drains      ingress.Drains                         // ingresses a reload stopped, still draining
	tlsSettings atomic.Pointer[map[string]tlsSettings] // observers.go

	stopSampling context.CancelFunc
	sampling     sync.WaitGroup
	workers      *workers

	limits        atomic.Pointer[map[string]*Limits]       // by listener name (limits.go)
	meshes        atomic.Pointer[map[string]*mesh.Inbound] // mesh listeners by name (mesh.go)
	listenerRates atomic.Pointer[rateLimiters]             // by listener name (ratelimits.go)
	global        *concurrency.Limiter                     // Config.MaxRequests (admission.go)
	coldHold      time.Duration                            // admission.go; a test lengthens it
}

// New validates cfg and builds the routing state without binding anything.
// Errors: an unknown policy, a bad backend scheme, a route naming an unknown
// upstream or duplicating another route.
func New(cfg Config) (*Gateway, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	gm := observe.NewMetrics(cfg.Metrics)
	g := &Gateway{log: log, qlog: cfg.QUICLogger, listeners: map[string]*ingress.Listener{}, workers: newWorkers(),
		global: concurrency.New(concurrency.Limits{Max: cfg.MaxRequests}), coldHold: coldHold,
		obs: observe.Observers{Metrics: gm, Access: observe.NewAccessLog(log.Named("access_log"), gm),
			Tracing: new(observe.Tracing), Traffic: new(observe.Traffic), Log: log}}
	g.table.Store(&table{routes: mustEmptyTable(), upstreams: map[string]*upstream.Upstream{}, configs: map[string]*UpstreamConfig{}})
	g.paths.Store(&cfg.Paths)
	g.obs.Tracing.SetProvider(cfg.TracerProvider)
	if err := g.obs.Access.Start(cfg.AccessLog); err != nil {
		return nil, err
	}
	if err := g.applyUpstreams(cfg.Upstreams); err != nil {
		g.obs.Access.Close(time.Second)
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.stopSampling = cancel
	g.sampling.Go(func() { g.sampleUpstreams(ctx, time.Second) })
	return g, nil
}

func mustEmptyTable() *route.Table[*upstream.Upstream] {
	t, err := route.Build[*upstream.Upstream](nil, nil)
	if err != nil {
		panic(err)
	}
	return t
}

// Generation is the number of successful Applys, starting at 1 after New.
func (g *Gateway) Generation() uint64 { return g.table.Load().generation }

// Apply switches to cfg: upstreams whose transport settings are unchanged
// keep their backends and connections; changed ones are rebuilt (keeping
// what discovery reported) and the old ones drain; the route table is
// swapped atomically; listeners are started, stopped or re-keyed. Logger,
// QUICLogger and Metrics are kept from New. On error nothing changes.
func (g *Gateway) Apply(ctx context.Context, cfg Config) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shutdown {
		return errClosed
	}
	out, err := g.obs.Access.Prepare(cfg.AccessLog)
	if err != nil {
		return err
	}
	if err := g.applyUpstreamsLocked(cfg.Upstreams); err != nil {
		out.Close()
		return err
	}
	g.obs.Access.Commit(cfg.AccessLog, out)
	g.paths.Store(&cfg.Paths)
	g.global.Set(concurrency.Limits{Max: cfg.MaxRequests})
	g.obs.Tracing.SetProvider(cfg.TracerProvider)
	return g.applyListenersLocked(ctx, cfg.Listeners)
}

func (g *Gateway) applyUpstreams(ups []UpstreamConfig) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.applyUpstreamsLocked(ups)
}

func (g *Gateway) applyUpstreamsLocked(ups []UpstreamConfig) error {
	old := g.table.Load()
	rates, err := upstreamRateLimiters(old.rates, ups)
	if err != nil {
		return err
	}
	n := len(ups)
	next := &table{generation: old.generation + 1, upstreams: make(map[string]*upstream.Upstream, n), configs: make(map[string]*UpstreamConfig, n), rates: rates,
		limiters: make(map[string]*concurrency.Limiter, n), attempts: make(map[*upstream.Upstream]*retry.Settings, n)}
	// next.configs point into configs (one allocation, never grown): a map
	// of thousands of values this large would allocate each one.
	configs := make([]UpstreamConfig, 0, n)
	nroutes := 0
	for i := range ups {
		nroutes += len(ups[i].Routes)
	}
	defs := make([]route.Definition, 0, nroutes)
	var created []*upstream.Upstream
	fail := func(err error) error {
		for _, u := range created {
			u.Close()
		}
		return err
	}
	events := g.onEvent // one method value for all
	for _, uc := range ups {
		if _, dup := next.upstreams[uc.Name]; dup {
			return fail(fmt.Errorf("gateway: duplicate upstream %q", uc.Name))
		}
		uc.Events = events
		u, reused := old.upstreams[uc.Name], false
		if u != nil && sameTransport(u.Config(), uc.Config) {
			reused = true
		} else {
			nu, err := upstream.New(uc.Config)
			if err != nil {
				return fail(fmt.Errorf("gateway: upstream %q: %w", uc.Name, err))
			}
			created = append(created, nu)
			if u != nil {
				if err := nu.Adopt(u); err != nil {
					return fail(err)
				}
			}
			u = nu
		}
		if oc := old.configs[uc.Name]; !reused || oc == nil || !sameSpecs(oc.Static, uc.Static) {
			if err := u.SetStatic(uc.Static); err != nil {
				return fail(err)
			}
		}
		ap := old.attempts[u]
		if ap == nil || !ap.Holds(uc.Retry, uc.Hedge) {
			if ap, err = retry.NewSettings(uc.Retry, uc.Hedge, ap); err != nil {
				return fail(fmt.Errorf("gateway: upstream %q: %w", uc.Name, err))
			}
		}
		next.upstreams[uc.Name] = u
		configs = append(configs, uc)
		next.configs[uc.Name] = &configs[len(configs)-1]
		next.attempts[u] = ap
		for i, rc := range uc.Routes {
			defs = append(defs, route.Definition{Upstream: uc.Name, Host: rc.Host, PathPrefix: rc.PathPrefix, Path: rc.Path, PathRegex: rc.PathRegex,
				Methods: rc.Methods, Upgrades: rc.Upgrades, Index: i})
		}
	}
	rt, err := route.Build(defs, next.upstreams)
	if err != nil {
		return fail(fmt.Errorf("gateway: %w", err))
	}
	next.routes = rt
	byName := make(map[string]*retry.Settings, len(next.upstreams))
	for name, u := range next.upstreams {
		byName[name] = next.attempts[u]
	}
	if next.edge, err = buildEdgePolicies(old.edge, ups, byName, next.upstreams); err != nil {
		return fail(fmt.Errorf("gateway: %w", err))
	}
	if next.auth, err = g.buildAuthPolicies(old.auth, ups); err != nil {
		return fail(fmt.Errorf("gateway: %w", err))
	}
	for i := range configs {
		uc, name := &configs[i], configs[i].Name
		// Only now: a failed Apply changes no limit.
		next.upstreams[name].SetMaxRequestsPerBackend(uc.MaxRequestsPerBackend)
		if l := old.limiters[name]; l != nil {
			l.Set(uc.concurrencyLimits())
			next.limiters[name] = l
		} else {
			next.limiters[name] = concurrency.New(uc.concurrencyLimits())
		}
	}
	g.obs.Traffic.Keep(slices.Collect(maps.Keys(next.upstreams)))
	g.table.Store(next)
	closeRetiredForwards(old.auth, next.auth)
	for name, u := range old.upstreams {
		if next.upstreams[name] != u {
			u.Close()
			g.retired = append(g.retired, u)
		}
	}
	g.retired = slices.DeleteFunc(g.retired, func(u *upstream.Upstream) bool { return len(u.Draining()) == 0 })
	return nil
}

// config is the named upstream's configuration; the zero value for an
// unknown one.
func (t *table) config(name string) UpstreamConfig {
	if c := t.configs[name]; c != nil {
		return *c
	}
	return UpstreamConfig{}
}

func sameTransport(a, b upstream.Config) bool {
	return sameTLS(a.TLS, b.TLS) && a.Handshaker == b.Handshaker && a.SlowStart == b.SlowStart && equalPtr(a.Active, b.Active) && equalPtr(a.Passive, b.Passive) && a.LoadBalancing == b.LoadBalancing && a.HashOn == b.HashOn && a.ConnectTimeout == b.ConnectTimeout &&
		a.ResponseHeaderTimeout == b.ResponseHeaderTimeout && a.IdleTimeout == b.IdleTimeout && a.Discovered == b.Discovered
}

// sameTLS compares client TLS settings by content: the agent builds a new
// *tls.Config on every reload, and an unchanged one must not rebuild the
// upstream (which would reset backend health and connections).
func sameTLS(a, b *tls.Config) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil {
		return false
	}
	if a.ServerName != b.ServerName || a.InsecureSkipVerify != b.InsecureSkipVerify ||
		a.MinVersion != b.MinVersion || a.MaxVersion != b.MaxVersion || len(a.Certificates) != len(b.Certificates) {
		return false
	}
	if (a.RootCAs == nil) != (b.RootCAs == nil) || (a.RootCAs != nil && !a.RootCAs.Equal(b.RootCAs)) {
		return false
	}
	for i := range a.Certificates {
		ca, cb := a.Certificates[i].Certificate, b.Certificates[i].Certificate
		if len(ca) != len(cb) {
			return false
		}
		for j := range ca {
			if !bytes.Equal(ca[j], cb[j]) {
				return false
			}
		}
	}
	return true
}

func equalPtr[T comparable](a, b *T) bool {
	return a == b || (a != nil && b != nil && *a == *b)
}

func sameSpecs(a, b []upstream.Spec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// SetDiscovered replaces the discovered backends of an upstream with a full
// snapshot. Errors: an unknown upstream (it may have been removed by a
// reload; callers may ignore that) or an unusable spec (the previous set
// stays).
func (g *Gateway) SetDiscovered(name string, specs []upstream.Spec) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	u := g.table.Load().upstreams[name]
	if u == nil {
		return fmt.Errorf("gateway: unknown upstream %q", name)
	}
	return u.SetDiscovered(specs)
}

// Shutdown stops every listener gracefully: no new connections, GOAWAY to
// clients, in-flight requests finish until ctx is done, then connections
// close. Backends drain afterwards. Returns ctx.Err() when the drain budget
// ran out.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	g.shutdown = true
	ls := g.listeners
	g.listeners = map[string]*ingress.Listener{}
	for _, l := range ls {
		g.draining = append(g.draining, l)
	}
	g.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 0, len(ls))
	var emu sync.Mutex
	for _, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Shutdown(ctx); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	g.drains.Wait(ctx)
	for _, u := range g.table.Load().upstreams {
		u.Close()
	}
	closeRetiredForwards(g.table.Load().auth, nil)
	g.obs.Access.Close(accessLogFlushWait) // every request has been recorded
	g.stopSampling()
	g.sampling.Wait()
	// The counts of the last second (the drain's) reach go-metrics' sinks,
	// which the agent flushes after Shutdown (statsd, DogStatsD).
	g.FlushMetrics()
	g.workers.close()
	return errors.Join(errs...)
}

// Handler returns the request handler without a listener label, for tests
// and embedding.
func (g *Gateway) Handler() http.Handler { return g.handlerFor("") }

func (g *Gateway) handlerFor(listener string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.workers.run(g, listener, w, r, answer.Answer{}) })
}

// Package upstream holds an upstream's membership (static and discovered
// backends), the per-backend state that survives membership changes, and the
// immutable eligible set that requests read without locks.
package upstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/balance"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
)

// Sources of membership.
const (
	SourceStatic    = "static"
	SourceDiscovery = "discovery"
)

// Spec describes one backend as a membership source reports it.
type Spec struct {
	// ID is the stable identity: the configured backend name for static
	// backends, "node/service-id" for discovered ones.
	ID string
	// Scheme is transport.SchemeHTTP (HTTP/1.1), transport.SchemeHTTPS
	// (HTTP/2 over TLS) or transport.SchemeH2C (cleartext HTTP/2).
	Scheme string
	// Host is a hostname or IP literal (no brackets); Port is 1..65535.
	Host string
	Port int
	// Weight is the relative weight, ≥ 1 (0 is treated as 1).
	Weight int
	// Suppressed, when not empty, says why a known member must not receive
	// traffic (e.g. a Consul instance with an unusable address or scheme): it
	// is reported with membership "suppressed" and gets no transport.
	Suppressed string
}

// Addr returns host:port, bracketing IPv6 literals.
func (s Spec) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Config is an upstream's static configuration.
type Config struct {
	Name string
	// LoadBalancing names a balance policy ("" = round_robin); HashOn is the
	// consistent_hash key (balance.Options).
	LoadBalancing, HashOn string
	// TLS is the client configuration for HTTP/2-over-TLS backends (nil:
	// system roots, verification on).
	TLS *tls.Config
	// Handshaker, when set, secures every backend connection instead of
	// TLS (transport.Options.Handshaker): a Consul Connect upstream's mTLS
	// (gateway/mesh.Outbound). Its failures are connect failures of the
	// backend dialled (passive health, outlier detection, retries on
	// connect failures), like a refused TCP connection.
	Handshaker transport.Handshaker
	// ConnectTimeout, ResponseHeaderTimeout and IdleTimeout as in the HCL
	// `timeouts` block.
	ConnectTimeout, ResponseHeaderTimeout, IdleTimeout time.Duration
	// Discovered is true when a discovery source feeds this upstream; until
	// its first SetDiscovered the upstream reports itself pending.
	Discovered bool
	// DNSRefresh is how often hostname backends are re-resolved (default
	// 30s); Resolver does the lookups (default net.DefaultResolver).
	DNSRefresh time.Duration
	Resolver   Resolver
	// SlowStart ramps the weight of a new or recovered backend from 1 to its
	// full weight over this duration (0: off).
	SlowStart time.Duration
	// Active and Passive configure health checks and outlier ejection (nil:
	// off).
	Active  *health.ActiveConfig
	Passive *health.PassiveConfig
	// NewTransport builds each backend's round-tripper (nil: transport.New);
	// benchmarks plug in an in-memory backend here.
	NewTransport func(transport.Options) (transport.RoundTripper, error)
	// Events receives backend lifecycle events (nil: none). It is called
	// from checker goroutines and request paths; it must not block.
	Events func(Event)
}

// Event is a backend lifecycle transition of one upstream.
type Event struct {
	Upstream, Backend string
	// Kind is "added", "removed", "health" (active status change), "ejected"
	// or "returned".
	Kind string
	// From and To are active statuses (health events); Reason is the
	// canonical failure reason.
	From, To health.Status
	Reason   string
}

// Set is an immutable snapshot of an upstream's eligible backends.
type Set struct {
	Backends []*Backend
	// Suppressed are members withheld from traffic, for reporting.
	Suppressed []Spec
	picker     balance.Picker
	// Pending is true while a discovery-fed upstream has not synced yet.
	Pending bool
}

// Upstream is one upstream's runtime. Pick is lock-free; membership updates
// are serialized by mu and publish a new Set atomically.
type Upstream struct {
	cfg    Config
	policy balance.Policy
	set    atomic.Pointer[Set]
	budget health.Budget
	// maxPerBackend is max_requests_per_backend, shared by the backends
	// (Backend.maxFlight); ≤ 0: none.
	maxPerBackend atomic.Int64
	// answers counts the answers of every backend (Backend.Answered): the
	// evidence that a silent one is behind.
	answers answerLog
	ctx     context.Context // lives until Close; parent of checker goroutines
	cancel  context.CancelFunc

	mu         sync.Mutex // guards the fields below (writers only)
	static     []Spec
	discovered []Spec
	synced     bool
	suppressed []Spec
	backends   map[string]*Backend // by source + "/" + ID
	draining   []*Backend          // removed with requests in flight, for reports
	closed     bool
	// inherited is the backends of the upstream this one replaced (Adopt),
	// whose health a backend with the same key and spec takes over when it
	// is created; SetStatic, which follows Adopt, ends the hand-over.
	inherited map[string]*Backend
}

// New returns an upstream with no members. Errors: an unknown policy.
func New(cfg Config) (*Upstream, error) {
	p, err := balance.New(cfg.LoadBalancing, balance.Options{HashOn: cfg.HashOn})
	if err != nil {
		return nil, err
	}
	u := &Upstream{cfg: cfg, policy: p, backends: map[string]*Backend{}, answers: answerLog{first: make(chan struct{})}}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	u.budget.Size = func() int { return len(u.set.Load().Backends) }
	u.set.Store(&Set{Pending: cfg.Discovered, picker: p.Picker(nil)})
	return u, nil
}

// FirstAnswer is closed when a request to a backend of the upstream first
// had an outcome (response headers of any status, or a failure): until
// then no backend can be told to be behind (Backend.Claim, Cold).
func (u *Upstream) FirstAnswer() <-chan struct{} { return u.answers.first }

// Name is the upstream's name.
func (u *Upstream) Name() string { return u.cfg.Name }

// Config returns the configuration the upstream was built with.
func (u *Upstream) Config() Config { return u.cfg }

// Current returns the current eligible set (never nil).
func (u *Upstream) Current() *Set { return u.set.Load() }

// InFlight is the number of requests in flight to the current set's
// backends (retries included): the impulse_upstream_in_flight gauge.
func (u *Upstream) InFlight() int64 {
	var n int64
	for _, b := range u.Current().Backends {
		n += b.InFlight()
	}
	return n
}

// Pick selects a backend for r from the current set, or nil when the set is
// empty or none is eligible; a Full backend is not. When every member that
// could take r is ejected, the one ejected longest ago is picked
// (leastRecentlyEjected): ejection never empties an upstream. The caller inspects
// Set.Pending and Set.Saturated to tell the 503s apart, and counts the
// request with TryAcquire (another request may have filled the backend
// since).
func (u *Upstream) Pick(r *http.Request) (*Backend, *Set) {
	s := u.set.Load()
	if len(s.Backends) == 0 {
		return nil, s
	}
	i := s.picker.Pick(r, balance.Skip{})
	if i < 0 {
		i = s.leastUnanswered()
	}
	if i < 0 {
		i = s.leastRecentlyEjected()
	}
	if i < 0 {
		return nil, s
	}
	return s.Backends[i], s
}

// leastRecentlyEjected is the fallback of a pick that found no eligible
// backend: when the only members that could take the request are ejected,
// ejection must not empty the upstream (an outlier detector that ejected
// everything would turn a partial outage into a total one), so the one
// ejected longest ago is tried. -1 when none is a candidate: members the
// active check or DNS rules out, or full ones, are never fallen back to.
func (s *Set) leastRecentlyEjected() int {
	best, bestAt := -1, time.Time{}
	for i, b := range s.Backends {
		at := b.Health.EjectedSince()
		if at.IsZero() || !b.Health.Usable() || !b.res.usable() || b.Full() {
			continue
		}
		if best < 0 || at.Before(bestAt) {
			best, bestAt = i, at
		}
	}
	return best
}

// PickExcept is Pick for a retry: the upstream's policy picks among the
// eligible backends that are not in tried (the backends the request has
// already been sent to), and among all eligible ones when none is left, so
// a retry goes to the only backend rather than nowhere. It returns nil when
// no backend is eligible. With tried empty it is Pick. The tried backends
// are found in the current set by a scan (O(len(set) × len(tried)), on the
// retry path only); one that left the set needs no skipping.
func (u *Upstream) PickExcept(r *http.Request, tried []*Backend) (*Backend, *Set) {
	s := u.set.Load()
	if len(tried) == 0 || len(s.Backends) == 0 {
		return u.Pick(r)
	}
	var skip balance.Skip
	for i, b := range s.Backends {
		if slices.Contains(tried, b) && !skip.Add(i) {
			break
		}
	}
	i := s.picker.Pick(r, skip)
	if i < 0 && skip.Len() > 0 {
		i = s.picker.Pick(r, balance.Skip{})
	}
	if i < 0 {
		i = s.leastUnanswered() // never an ejected one: a retry goes nowhere then
	}
	if i < 0 {
		return nil, s
	}
	return s.Backends[i], s
}

// SetStatic replaces the static members. Errors: a spec the transport
// cannot serve (unknown scheme); the previous members stay in that case.
func (u *Upstream) SetStatic(specs []Spec) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	defer func() { u.inherited = nil }()
	return u.rebuild(specs, u.discovered, u.synced)
}

// SetDiscovered replaces the discovered members with a full snapshot (never
// a delta) and marks the upstream as synced.
func (u *Upstream) SetDiscovered(specs []Spec) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.rebuild(u.static, specs, true)
}

// rebuild publishes a new set from the two sources, reusing the state of
// backends that stay and draining the ones that leave. Callers hold mu.
func (u *Upstream) rebuild(static, discovered []Spec, synced bool) error {
	if u.closed {
		return fmt.Errorf("upstream %q: closed", u.cfg.Name)
	}
	next := make(map[string]*Backend, len(static)+len(discovered))
	var created []*Backend
	var suppressed []Spec
	tookOver := map[*Backend]bool{} // created backends that took over a predecessor's state
	add := func(source string, specs []Spec) error {
		for _, s := range specs {
			if s.Suppressed != "" {
				suppressed = append(suppressed, s)
				continue
			}
			key := source + "/" + s.ID
			if b, ok := u.backends[key]; ok && b.Spec == s {
				next[key] = b
				continue
			}
			res := newResolver(s.Host, s.Port)
			newTransport := u.cfg.NewTransport
			if newTransport == nil {
				newTransport = transport.New
			}
			rt, err := newTransport(transport.Options{
				Scheme: s.Scheme, TLS: u.cfg.TLS, Handshaker: u.cfg.Handshaker,
				ConnectTimeout: u.cfg.ConnectTimeout, IdleTimeout: u.cfg.IdleTimeout,
				ResponseHeaderTimeout: u.cfg.ResponseHeaderTimeout,
				Dial: func(ctx context.Context, d *net.Dialer, network string) (net.Conn, error) {
					return res.dial(ctx, d, network)
				},
			})
			if err != nil {
				return fmt.Errorf("upstream %q: backend %q: %w", u.cfg.Name, s.ID, err)
			}
			b := &Backend{Spec: s, Source: source, Transport: rt, slowStart: u.slowStart(), res: res, hostPort: s.Addr(), maxFlight: &u.maxPerBackend,
				requests: new(atomic.Uint64), responses: new(ResponseCounter)}
			b.answers = &u.answers
			// A new member is not behind for what its siblings answered
			// before it joined.
			b.answersAtLast.Store(u.answers.n.Load())
			if p := u.cfg.Passive; p != nil {
				b.unansweredLimit = int64(p.ConsecutiveFailures)
			}
			b.Health = health.New(u.cfg.Active, u.cfg.Passive, &u.budget, u.notifier(b))
			// The same backend with another weight, or in the upstream a
			// reload replaced: same target, same health, no new ramp.
			prev := u.backends[key]
			if prev == nil {
				prev = u.inherited[key]
			}
			if prev != nil && prev.sameTarget(s) {
				b.Health.Inherit(prev.Health)
				b.warmSince.Store(prev.warmSince.Load())
				// Its counts go on: a reload must not make the status
				// page's backend rows restart from zero.
				b.requests, b.responses = prev.requests, prev.responses
				tookOver[b] = true
			}
			next[key] = b
			created = append(created, b)
		}
		return nil
	}
	if err := add(SourceStatic, static); err != nil {
		return err
	}
	if err := add(SourceDiscovery, discovered); err != nil {
		for _, b := range created {
			b.Transport.CloseIdleConnections()
		}
		return err
	}
	u.draining = stillDraining(u.draining)
	for key, b := range u.backends {
		if next[key] != b {
			drain(b)
			u.emit(Event{Backend: b.ID, Kind: "removed"})
			if b.InFlight() > 0 {
				u.draining = append(u.draining, b)
			}
		}
	}
	initial := len(u.backends) == 0 // the first members share no traffic yet: no ramp
	for _, b := range created {
		if !initial && !tookOver[b] {
			b.warmUp()
		}
		u.startChecks(b)
		u.emit(Event{Backend: b.ID, Kind: "added"})
	}
	u.backends, u.static, u.discovered, u.synced = next, static, discovered, synced
	u.suppressed = suppressed
	u.publish()
	return nil
}

func (u *Upstream) publish() {
	s := &Set{Pending: u.cfg.Discovered && !u.synced && len(u.static) == 0, Suppressed: u.suppressed}
	for _, b := range u.backends {
		s.Backends = append(s.Backends, b)
	}
	// A stable order keeps round-robin fair across swaps and reports readable.
	sort.Slice(s.Backends, func(i, j int) bool {
		if s.Backends[i].Source != s.Backends[j].Source {
			return s.Backends[i].Source > s.Backends[j].Source // static first
		}
		return s.Backends[i].ID < s.Backends[j].ID
	})
	cands := make([]balance.Candidate, len(s.Backends))
	for i, b := range s.Backends {
		cands[i] = pickable{b}
	}
	s.picker = u.policy.Picker(cands)
	u.set.Store(s)
}

// drain marks b removed: new picks no longer see it, in-flight requests
// finish, and its idle connections close once the last one ends.
func drain(b *Backend) {
	if b.stopChecks != nil {
		b.stopChecks()
	}
	b.Health.Close()
	b.removed.Store(true)
	if b.inFlight.Load() == 0 {
		b.Transport.CloseIdleConnections()
	}
}

// Adopt copies the discovered members and sync state of old into u, so a
// reload that rebuilds an upstream keeps what discovery already reported;
// the backends created until the next SetStatic (the static ones) take over
// the health of old's backend with the same identity and spec
// (health.State.Inherit).
func (u *Upstream) Adopt(old *Upstream) error {
	old.mu.Lock()
	discovered, synced := old.discovered, old.synced
	inherited := maps.Clone(old.backends)
	old.mu.Unlock()
	u.mu.Lock()
	defer u.mu.Unlock()
	u.inherited = inherited
	if !synced {
		return nil
	}
	return u.rebuild(u.static, discovered, true)
}

// Close drains every backend and refuses further updates. In-flight
// requests finish on their existing connections.
func (u *Upstream) Close() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return
	}
	u.closed = true
	for _, b := range u.backends {
		drain(b)
		u.draining = append(u.draining, b)
	}
	u.draining = stillDraining(u.draining)
	u.cancel()
}

// Draining returns the removed backends (all of them once the upstream is
// closed) that still have requests in flight: membership "removed" in
// reports until their last request ends.
func (u *Upstream) Draining() []*Backend {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.draining = stillDraining(u.draining)
	return slices.Clone(u.draining)
}

// stillDraining keeps the backends of bs that have requests in flight.
func stillDraining(bs []*Backend) []*Backend {
	return slices.DeleteFunc(bs, func(b *Backend) bool { return b.InFlight() == 0 })
}

// slowStart is the ramp for new backends. consistent_hash reads weights only
// when its table is built, so a ramp would freeze a joining backend at weight
// 1 until the next membership change: it gets no slow start (as in Envoy).
func (u *Upstream) slowStart() time.Duration {
	if u.cfg.LoadBalancing == balance.ConsistentHash {
		return 0
	}
	return u.cfg.SlowStart
}

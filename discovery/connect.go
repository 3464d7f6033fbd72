package discovery

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"time"

	"github.com/hashicorp/consul/api"
)

// Connect (service mesh) watches: the CA roots, a service's leaf certificate
// and the intentions whose destination is a service, each a blocking query on
// the local agent run by runWatch like the health and catalog watches (same
// index rules, rate limit, backoff, status and metrics). They emit
// Consul-free values; what is trusted and allowed is decided elsewhere
// (gateway/mesh, converted by the agent).
//
// Sources: Consul HTTP API docs "Agent → Connect" (/v1/agent/connect/ca/roots,
// /v1/agent/connect/ca/leaf/:service) and "Connect → Intentions"
// (/v1/connect/intentions/match), Consul v1.14.

// Endpoints of the Connect watches. They are also the "service" label of
// those watches' metrics, like [CatalogEndpoint]: the leaf and intentions
// labels end with the service name, one label per mesh identity.
const (
	RootsEndpoint      = "/v1/agent/connect/ca/roots"
	LeafEndpoint       = "/v1/agent/connect/ca/leaf/"                        // + service
	IntentionsEndpoint = "/v1/connect/intentions/match?by=destination&name=" // + service
)

// Kinds of Connect watch, in [ConnectQuery.Kind].
const (
	ConnectRoots      = "roots"
	ConnectLeaf       = "leaf"
	ConnectIntentions = "intentions"
)

// ConnectQuery identifies a Connect watch in [WatchStatus].
type ConnectQuery struct {
	// Kind is ConnectRoots, ConnectLeaf or ConnectIntentions.
	Kind string
	// Service is the service of a leaf or intentions watch; "" for roots.
	Service string
}

// Endpoint returns the Consul endpoint the watch queries, as in logs and the
// metrics' "service" label.
func (q ConnectQuery) Endpoint() string {
	switch q.Kind {
	case ConnectLeaf:
		return LeafEndpoint + url.PathEscape(q.Service)
	case ConnectIntentions:
		return IntentionsEndpoint + url.QueryEscape(q.Service)
	}
	return RootsEndpoint
}

// CARoots is the set of Connect CA roots the local agent trusts, from
// /v1/agent/connect/ca/roots. Values are shared: consumers must not modify
// them.
type CARoots struct {
	// TrustDomain is the cluster's SPIFFE trust domain, e.g.
	// "11111111-2222-3333-4444-555555555555.consul".
	TrustDomain string
	// ActiveRootID is the ID of the root that signs new leaf certificates.
	ActiveRootID string
	// Roots are every current root, in Consul's order: during and after a
	// rotation the old root stays until the leaves it signed have expired.
	Roots []CARoot
	// Index is the X-Consul-Index of the reply; Time when it was emitted.
	Index uint64
	Time  time.Time
}

// CARoot is one Connect CA root.
type CARoot struct {
	ID   string
	Name string
	// RootCertPEM is the root certificate, PEM.
	RootCertPEM string
	// IntermediatePEMs are the intermediates that chain leaves signed under
	// this root to it (and, after a rotation, the new root cross-signed by
	// the old one), PEM each, in Consul's order. Often empty.
	IntermediatePEMs []string
	// Active is true for the root of ActiveRootID.
	Active bool
	// NotBefore and NotAfter bound the root's validity (zero when Consul
	// did not say).
	NotBefore, NotAfter time.Time
}

// LeafCert is a service's Connect leaf certificate from
// /v1/agent/connect/ca/leaf/<service>. The agent renews it by itself (at
// about half its lifetime, or when the active root changes) and the
// blocking query returns the new one. It holds a private key: never log it.
type LeafCert struct {
	// Service is the service the certificate identifies.
	Service string
	// ServiceURI is its SPIFFE ID, e.g.
	// "spiffe://<trust-domain>/ns/default/dc/dc1/svc/web".
	ServiceURI string
	// SerialNumber is the certificate's serial, colon-separated hex.
	SerialNumber string
	// CertPEM is the leaf followed by the intermediates that chain it to its
	// root: the chain to serve.
	CertPEM string
	// PrivateKeyPEM is the leaf's private key, PEM.
	PrivateKeyPEM string
	// ValidAfter and ValidBefore bound the certificate's validity.
	ValidAfter, ValidBefore time.Time
	// Index is the X-Consul-Index of the reply (the certificate's
	// ModifyIndex); Time when it was emitted.
	Index uint64
	Time  time.Time
}

// ACL default policies, as in the X-Consul-Default-ACL-Policy header.
const (
	PolicyAllow = "allow"
	PolicyDeny  = "deny"
)

// Intentions are the intentions whose destination matches a service (its
// name or "*"), from /v1/connect/intentions/match?by=destination.
type Intentions struct {
	// Service is the destination asked for.
	Service string
	// DefaultPolicy is the X-Consul-Default-ACL-Policy header of the reply:
	// PolicyAllow (ACLs off, or default allow) or PolicyDeny; "" when
	// Consul did not send it (the consumer decides; failing closed is the
	// safe reading). Consul applies it when no intention matches.
	DefaultPolicy string
	// Intentions are in Consul's order: highest precedence first.
	Intentions []Intention
	// Index is the X-Consul-Index of the reply; Time when it was emitted.
	Index uint64
	Time  time.Time
}

// Intention is one intention as Consul reports it (api.Intention, without
// timestamps, hashes and metadata).
type Intention struct {
	ID          string
	Description string
	// Source: peer (cluster peering) or partition, namespace and name;
	// "*" is a wildcard for the namespace and the name. SourceType is
	// "consul".
	SourcePeer, SourcePartition, SourceNS, SourceName string
	SourceType                                        string
	// Destination: partition, namespace, name ("*" for a wildcard).
	DestinationPartition, DestinationNS, DestinationName string
	// Action is "allow" or "deny" for an L4 intention, "" for an L7 one.
	Action string
	// Permissions are an L7 intention's permissions, in order.
	Permissions []IntentionPermission
	// Precedence is Consul's precedence value (higher first; 1..9).
	Precedence int
}

// IntentionPermission is one L7 permission: Action applies to requests that
// HTTP matches (a nil HTTP matches every request).
type IntentionPermission struct {
	Action string
	HTTP   *IntentionHTTP
	// JWT is true when the permission carries JWT requirements (Consul
	// 1.16+), which this gateway does not verify.
	JWT bool
}

// IntentionHTTP is the HTTP part of a permission; every part that is set
// must match.
type IntentionHTTP struct {
	PathExact, PathPrefix, PathRegex string
	Header                           []IntentionHeader
	Methods                          []string
}

// IntentionHeader matches one request header (Contains and IgnoreCase
// exist from Consul 1.16 on).
type IntentionHeader struct {
	Name                                   string
	Present                                bool
	Exact, Prefix, Suffix, Contains, Regex string
	Invert, IgnoreCase                     bool
}

// WatchRoots runs a blocking-query loop on /v1/agent/connect/ca/roots until
// ctx is done, then returns ctx.Err() (another error only for a nil emit).
// emit receives the roots after the first successful query and whenever
// they change in content. Failed queries never emit: the last roots stay
// the truth; they are logged, counted and retried with backoff as for
// [Client.Watch]. emit must be cheap and must not modify its argument.
func (c *Client) WatchRoots(ctx context.Context, emit func(CARoots)) error {
	if emit == nil {
		return errors.New("discovery: roots watch: emit is nil")
	}
	q := ConnectQuery{Kind: ConnectRoots}
	return runConnect(ctx, c, q, "roots", c.fetchRoots, sameRoots, func(r CARoots) int { return len(r.Roots) },
		func(r CARoots, index uint64, at time.Time) {
			r.Index, r.Time = index, at
			emit(r)
		})
}

// WatchLeaf runs a blocking-query loop on /v1/agent/connect/ca/leaf/<service>
// until ctx is done, then returns ctx.Err() (another error only for an empty
// service or a nil emit). emit receives the certificate after the first
// successful query and each time the agent renews it. The token needs
// service:write on service; a 403 is reported like any failed query (status,
// metrics) and the last certificate stays the truth.
func (c *Client) WatchLeaf(ctx context.Context, service string, emit func(LeafCert)) error {
	if service == "" {
		return errors.New("discovery: leaf watch: service name is empty")
	}
	if emit == nil {
		return errors.New("discovery: leaf watch " + service + ": emit is nil")
	}
	q := ConnectQuery{Kind: ConnectLeaf, Service: service}
	fetch := func(ctx context.Context, index uint64, wait time.Duration) (LeafCert, uint64, error) {
		return c.fetchLeaf(ctx, service, index, wait)
	}
	return runConnect(ctx, c, q, "certificate", fetch,
		func(a, b LeafCert) bool {
			a.Index, a.Time, b.Index, b.Time = 0, time.Time{}, 0, time.Time{}
			return a == b
		},
		func(LeafCert) int { return 1 },
		func(l LeafCert, index uint64, at time.Time) {
			l.Index, l.Time = index, at
			emit(l)
		})
}

// WatchIntentions runs a blocking-query loop on
// /v1/connect/intentions/match?by=destination&name=<service> until ctx is
// done, then returns ctx.Err() (another error only for an empty service or a
// nil emit). emit receives the intentions (and the ACL default policy) after
// the first successful query and whenever they change: intentions created,
// updated or deleted through the API or service-intentions config entries
// are seen without a restart. The token needs intentions:read on service.
func (c *Client) WatchIntentions(ctx context.Context, service string, emit func(Intentions)) error {
	if service == "" {
		return errors.New("discovery: intentions watch: service name is empty")
	}
	if emit == nil {
		return errors.New("discovery: intentions watch " + service + ": emit is nil")
	}
	q := ConnectQuery{Kind: ConnectIntentions, Service: service}
	fetch := func(ctx context.Context, index uint64, wait time.Duration) (Intentions, uint64, error) {
		return c.fetchIntentions(ctx, service, index, wait)
	}
	return runConnect(ctx, c, q, "intentions", fetch, sameIntentions,
		func(i Intentions) int { return len(i.Intentions) },
		func(i Intentions, index uint64, at time.Time) {
			i.Index, i.Time = index, at
			emit(i)
		})
}

// runConnect runs one Connect watch through runWatch. These watches hold no
// resync grace: roots, a leaf and intentions are always whole, and an empty
// intention list is a real answer (every intention deleted).
func runConnect[T any](ctx context.Context, c *Client, q ConnectQuery, noun string, fetch fetchFunc[T],
	same func(a, b T) bool, size func(T) int, emit func(T, uint64, time.Time)) error {
	qc := q
	w := &watchState{st: WatchStatus{Connect: &qc}}
	defer c.track(w)()
	endpoint := q.Endpoint()
	log := c.cfg.Logger.With("connect", q.Kind)
	if q.Service != "" {
		log = log.With("service", q.Service)
	}
	return runWatch(ctx, c, w, watchSpec[T]{
		label:    endpoint,
		endpoint: endpoint,
		noun:     noun,
		log:      log,
		fetch:    fetch,
		same:     same,
		size:     size,
		merge:    func(_, result T) (T, bool) { return result, false },
		settles:  func(T) bool { return true },
		emit:     emit,
	})
}

// queryOpts are the options of one blocking Connect query.
func (c *Client) queryOpts(ctx context.Context, index uint64, wait time.Duration) *api.QueryOptions {
	return (&api.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(ctx)
}

// rootsReply is the JSON of /v1/agent/connect/ca/roots. api.CARoot lacks
// IntermediateCerts, so the reply is decoded here (through the api client's
// transport, Raw().Query).
type rootsReply struct {
	ActiveRootID string
	TrustDomain  string
	Roots        []*struct {
		ID                string
		Name              string
		RootCert          string
		IntermediateCerts []string
		Active            bool
		NotBefore         time.Time
		NotAfter          time.Time
	}
}

func (c *Client) fetchRoots(ctx context.Context, index uint64, wait time.Duration) (_ CARoots, _ uint64, err error) {
	start := time.Now()
	defer func() { c.metrics.queryDone(RootsEndpoint, start, err) }()
	var out rootsReply
	meta, err := c.api.Raw().Query(RootsEndpoint, &out, c.queryOpts(ctx, index, wait))
	if err != nil {
		return CARoots{}, 0, classify(RootsEndpoint, unwrapURL(err))
	}
	r := CARoots{TrustDomain: out.TrustDomain, ActiveRootID: out.ActiveRootID, Roots: make([]CARoot, 0, len(out.Roots))}
	for _, x := range out.Roots {
		if x == nil {
			continue
		}
		r.Roots = append(r.Roots, CARoot{ID: x.ID, Name: x.Name, RootCertPEM: x.RootCert,
			IntermediatePEMs: slices.Clone(x.IntermediateCerts), Active: x.Active, NotBefore: x.NotBefore, NotAfter: x.NotAfter})
	}
	return r, meta.LastIndex, nil
}

func sameRoots(a, b CARoots) bool {
	return a.TrustDomain == b.TrustDomain && a.ActiveRootID == b.ActiveRootID &&
		slices.EqualFunc(a.Roots, b.Roots, func(x, y CARoot) bool {
			return x.ID == y.ID && x.Name == y.Name && x.RootCertPEM == y.RootCertPEM && x.Active == y.Active &&
				x.NotBefore.Equal(y.NotBefore) && x.NotAfter.Equal(y.NotAfter) && slices.Equal(x.IntermediatePEMs, y.IntermediatePEMs)
		})
}

func (c *Client) fetchLeaf(ctx context.Context, service string, index uint64, wait time.Duration) (_ LeafCert, _ uint64, err error) {
	endpoint := LeafEndpoint + url.PathEscape(service)
	start := time.Now()
	defer func() { c.metrics.queryDone(endpoint, start, err) }()
	l, meta, err := c.api.Agent().ConnectCALeaf(service, c.queryOpts(ctx, index, wait))
	if err != nil {
		return LeafCert{}, 0, classify(endpoint, unwrapURL(err))
	}
	if l.CertPEM == "" || l.PrivateKeyPEM == "" {
		return LeafCert{}, 0, classify(endpoint, errNoLeaf)
	}
	return LeafCert{Service: l.Service, ServiceURI: l.ServiceURI, SerialNumber: l.SerialNumber, CertPEM: l.CertPEM,
		PrivateKeyPEM: l.PrivateKeyPEM, ValidAfter: l.ValidAfter, ValidBefore: l.ValidBefore}, meta.LastIndex, nil
}

// errNoLeaf reports a 200 reply without a certificate or key.
var errNoLeaf = errors.New("reply without a certificate or private key")

func (c *Client) fetchIntentions(ctx context.Context, service string, index uint64, wait time.Duration) (_ Intentions, _ uint64, err error) {
	endpoint := IntentionsEndpoint + url.QueryEscape(service)
	start := time.Now()
	defer func() { c.metrics.queryDone(endpoint, start, err) }()
	m, meta, err := c.api.Connect().IntentionMatch(&api.IntentionMatch{By: api.IntentionMatchDestination, Names: []string{service}},
		c.queryOpts(ctx, index, wait))
	if err != nil {
		return Intentions{}, 0, classify(endpoint, unwrapURL(err))
	}
	return Intentions{Service: service, DefaultPolicy: meta.DefaultACLPolicy, Intentions: intentionsFrom(m[service])}, meta.LastIndex, nil
}

func sameIntentions(a, b Intentions) bool {
	return a.Service == b.Service && a.DefaultPolicy == b.DefaultPolicy &&
		slices.EqualFunc(a.Intentions, b.Intentions, Intention.equal)
}

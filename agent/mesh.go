package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/gateway/mesh"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// meshIdentity owns the agent's Consul Connect identity (the top-level
// connect block): its own discovery client on the consul block's settings
// (hcl defaults it to the local agent, 127.0.0.1:8500 or CONSUL_HTTP_ADDR,
// when the block is absent), and three blocking watches — the CA roots, the
// leaf certificate of the service, the intentions whose destination is the
// service — whose snapshots it converts (meshconv.go) into the mesh.Inbound
// that every mesh listener serves and enforces. A failed query never
// clears what was delivered: the last leaf is served until it expires, the
// last roots and intentions stay in force.
type meshIdentity struct {
	log     hclog.Logger
	service string
	inbound *mesh.Inbound

	cancel context.CancelFunc
	done   chan struct{} // closed when every watch has returned

	mu     sync.Mutex // guards everything below
	client *discovery.Client
	state  meshState
	// problems is the last set of intention problems logged, joined, so
	// each is logged once per change of the intentions.
	problems string
	// outbounds are the diallers of the Connect upstreams, by target and
	// protocol: the same value across reloads, so an unchanged upstream
	// keeps its backends (gateway sameTransport compares it).
	outbounds map[outboundKey]*mesh.Outbound
}

type outboundKey struct {
	target mesh.ServiceID
	h2     bool
}

// newMeshIdentity returns the identity of c (nil when c is nil: no mesh).
func newMeshIdentity(c *hcl.Connect, log hclog.Logger) *meshIdentity {
	if c == nil {
		return nil
	}
	return &meshIdentity{log: log, service: c.Service, inbound: mesh.NewInbound(c.Service),
		state: meshState{service: c.Service}}
}

// start creates the Consul client from cc and starts the three watches,
// which run until stop. Errors: an unreadable token_file, settings the
// Consul client refuses.
func (m *meshIdentity) start(cc *hcl.Consul, mt *metrics.Metrics) error {
	token, err := resolveToken(cc)
	if err != nil {
		return err
	}
	dc := discoveryConfig(cc)
	dc.Token, dc.TokenFile, dc.ChangeFeed = token, "", false
	dc.Logger, dc.Metrics = m.log, mt
	client, err := discovery.New(dc)
	if err != nil {
		return fmt.Errorf("agent: connect: consul: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.mu.Lock()
	m.client, m.cancel, m.done = client, cancel, make(chan struct{})
	m.mu.Unlock()
	var wg sync.WaitGroup
	run := func(name string, f func(context.Context) error) {
		wg.Go(func() {
			defer func() {
				if p := recover(); p != nil {
					m.log.Error("connect watch panicked", "watch", name, "panic", p)
				}
			}()
			_ = f(ctx)
		})
	}
	run("roots", func(ctx context.Context) error { return client.WatchRoots(ctx, m.setRoots) })
	run("leaf", func(ctx context.Context) error { return client.WatchLeaf(ctx, m.service, m.setLeaf) })
	run("intentions", func(ctx context.Context) error { return client.WatchIntentions(ctx, m.service, m.setIntentions) })
	go func() {
		wg.Wait()
		close(m.done)
	}()
	m.log.Info("watching the Connect identity", "service", m.service)
	return nil
}

// stop ends the watches and closes the client; the Inbound keeps what it
// has (the listeners drain with it).
func (m *meshIdentity) stop() {
	if m == nil {
		return
	}
	m.mu.Lock()
	cancel, done, client := m.cancel, m.done, m.client
	m.cancel, m.client = nil, nil
	m.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	client.Close()
}

// setLeaf installs a new leaf: its PEM chain and key become the
// tls.Certificate served from the next handshake. One that does not load
// is logged and the last one stays.
func (m *meshIdentity) setLeaf(l discovery.LeafCert) {
	cert, err := tls.X509KeyPair([]byte(l.CertPEM), []byte(l.PrivateKeyPEM))
	if err != nil {
		m.log.Error("connect: the leaf certificate from Consul does not load; keeping the last one", "service", m.service, "error", err)
		return
	}
	m.inbound.SetLeaf(&cert) // Go parses cert.Leaf (x509keypairleaf)
	m.mu.Lock()
	m.state.leaf = &l
	m.mu.Unlock()
	m.log.Info("connect: leaf certificate installed", "service", m.service, "uri", l.ServiceURI, "serial", l.SerialNumber,
		"valid_before", l.ValidBefore.UTC().Format(time.RFC3339))
}

// setRoots installs a new trust bundle. Roots that do not build one are
// logged and the last bundle stays.
func (m *meshIdentity) setRoots(r discovery.CARoots) {
	b, err := meshBundle(r)
	if err != nil {
		m.log.Error("connect: the CA roots from Consul are unusable; keeping the last ones", "error", err)
		return
	}
	m.inbound.SetRoots(b)
	m.mu.Lock()
	m.state.roots = &r
	m.mu.Unlock()
	m.log.Info("connect: CA roots installed", "trust_domains", b.TrustDomains(), "roots", b.RootIDs(), "active", r.ActiveRootID)
}

// setIntentions compiles and installs the intentions. Each problem (an
// intention that denies because it cannot be compiled) is logged once per
// change of the set of problems.
func (m *meshIdentity) setIntentions(in discovery.Intentions) {
	rules, problems := meshRules(in)
	m.inbound.SetRules(rules)
	lines := make([]string, 0, len(problems))
	for _, p := range problems {
		lines = append(lines, p.Error())
	}
	slices.Sort(lines)
	key := strings.Join(lines, "\n")
	m.mu.Lock()
	m.state.intentions = &in
	logged := key == m.problems
	m.problems = key
	m.mu.Unlock()
	if !logged {
		for _, p := range problems {
			m.log.Warn("connect: intention denies: it cannot be enforced as written", "service", m.service,
				"intention", p.Intention, "error", p.Err)
		}
	}
	m.log.Info("connect: intentions installed", "service", m.service, "intentions", len(in.Intentions),
		"default_policy", in.DefaultPolicy)
}

// readiness is meshReadiness of the current state and watch statuses
// (notReady: the mesh listeners refuse handshakes).
func (m *meshIdentity) readiness(now time.Time) (notReady, degraded []string) {
	if m == nil {
		return nil, nil
	}
	m.mu.Lock()
	s, client := m.state, m.client
	m.mu.Unlock()
	if client != nil {
		for _, st := range client.Status() {
			if st.Connect == nil {
				continue
			}
			switch st.Connect.Kind {
			case discovery.ConnectLeaf:
				s.leafStatus = st
			case discovery.ConnectRoots:
				s.rootsStatus = st
			case discovery.ConnectIntentions:
				s.ixnStatus = st
			}
		}
	}
	return meshReadiness(s, now)
}

// meshListeners makes the listeners of cfg with connect = true mesh
// listeners of m's Inbound in gc (their TLS comes from it).
func meshListeners(gc *gateway.Config, cfg *hcl.Config, m *meshIdentity) {
	for i, l := range cfg.Listeners {
		if l.Connect && m != nil && i < len(gc.Listeners) && gc.Listeners[i].Name == l.Name {
			gc.Listeners[i].TLS, gc.Listeners[i].Mesh = nil, m.inbound
		}
	}
}

// meshUpstreams gives the Connect upstreams of cfg (consul { connect =
// true }) in gc m's outbound mTLS: each backend connection is secured by
// a mesh.Outbound of the upstream's service (in its consul block's
// datacenter, else the gateway's own, from its leaf), offering ALPN h2 for
// protocol http2 or grpc, http/1.1 for http. hcl requires the connect block
// for them, so m is not nil when there are any.
func meshUpstreams(gc *gateway.Config, cfg *hcl.Config, m *meshIdentity) {
	if m == nil {
		return
	}
	byName := map[string]*hcl.UpstreamConsul{}
	for _, u := range cfg.Upstreams {
		if u.Consul != nil && u.Consul.Connect {
			byName[u.Name] = u.Consul
		}
	}
	for i := range gc.Upstreams {
		if c := byName[gc.Upstreams[i].Name]; c != nil {
			want := mesh.ServiceID{Service: c.Service, Datacenter: c.Datacenter, Namespace: c.Namespace, Partition: c.Partition}
			gc.Upstreams[i].Handshaker = m.outbound(want, c.Protocol != hcl.ConnectProtocolHTTP)
		}
	}
}

// outbound is the cached dialler of want (h2: ALPN h2, else http/1.1).
func (m *meshIdentity) outbound(want mesh.ServiceID, h2 bool) *mesh.Outbound {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := outboundKey{want, h2}
	if o := m.outbounds[k]; o != nil {
		return o
	}
	alpn := mesh.ALPNHTTP1
	if h2 {
		alpn = mesh.ALPNH2
	}
	o := m.inbound.Outbound(want, alpn)
	if m.outbounds == nil {
		m.outbounds = map[outboundKey]*mesh.Outbound{}
	}
	m.outbounds[k] = o
	return o
}

// checkConnectReload refuses a reload that changes the connect block: the
// identity's watches and the mesh listeners' Inbound live as long as the
// process.
func checkConnectReload(old, next *hcl.Config) error {
	switch o, n := old.Connect, next.Connect; {
	case o == nil && n == nil:
		return nil
	case o != nil && n != nil && o.Service == n.Service && o.Native == n.Native:
		return nil
	case n != nil:
		return configErr(n.Range, "Connect identity changed", "connect", fmt.Errorf("adding or changing the connect block needs a restart"))
	}
	return configErr(old.Connect.Range, "Connect identity removed", "connect", fmt.Errorf("removing the connect block needs a restart"))
}

// connectDoc is the mesh identity in /v1/status: what the watches last
// delivered (never the private key).
type connectDoc struct {
	Service string `json:"service"`
	// Leaf: its SPIFFE ID, serial and end of validity (absent: none yet).
	LeafURI         string     `json:"leaf_uri,omitempty"`
	LeafSerial      string     `json:"leaf_serial,omitempty"`
	LeafValidBefore *time.Time `json:"leaf_valid_before,omitempty"`
	// TrustDomain, the root IDs and the active one (absent: none yet).
	TrustDomain  string   `json:"trust_domain,omitempty"`
	Roots        []string `json:"roots"`
	ActiveRootID string   `json:"active_root_id,omitempty"`
	// Intentions is how many intentions target the service, DefaultPolicy
	// Consul's ACL default policy ("" before the first answer).
	Intentions    int    `json:"intentions"`
	DefaultPolicy string `json:"default_policy,omitempty"`
}

// report is m's connectDoc (nil without a mesh identity).
func (m *meshIdentity) report() *connectDoc {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d := &connectDoc{Service: m.service, Roots: []string{}}
	if l := m.state.leaf; l != nil {
		vb := l.ValidBefore
		d.LeafURI, d.LeafSerial, d.LeafValidBefore = l.ServiceURI, l.SerialNumber, &vb
	}
	if r := m.state.roots; r != nil {
		d.TrustDomain, d.ActiveRootID = r.TrustDomain, r.ActiveRootID
		for _, x := range r.Roots {
			d.Roots = append(d.Roots, x.ID)
		}
	}
	if in := m.state.intentions; in != nil {
		d.Intentions, d.DefaultPolicy = len(in.Intentions), in.DefaultPolicy
	}
	return d
}

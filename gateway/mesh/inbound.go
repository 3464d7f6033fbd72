package mesh

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"
)

// Inbound is the state of the gateway's mesh listeners (listener
// { connect = true }) for one Connect identity: the leaf certificate
// served, the CA roots client certificates must chain to, and the compiled
// intentions. The agent sets each as its watch delivers it (SetLeaf,
// SetRoots, SetRules); every handshake and request reads the current value
// (atomic pointers), so rotations and intention changes need no listener
// restart. One Inbound is shared by every mesh listener, over TCP and QUIC
// alike, so both admit exactly the same peers.
//
// Until a leaf, the roots and the intentions have all been set, every
// handshake is refused. A leaf is served until its NotAfter even when the
// agent cannot renew it (Consul down); past it handshakes are refused.
type Inbound struct {
	service  string
	verifier Verifier
	leaf     atomic.Pointer[tls.Certificate]
	rules    atomic.Pointer[Rules]
	observe  atomic.Pointer[func(result, source string)]
	// ids caches the identity of recently seen peer certificates, so a
	// request does not parse its connection's URI SAN again.
	ids idCache
	// now returns the time leaf expiry is checked against; nil is
	// time.Now (tests).
	now func() time.Time
}

// Results an Inbound reports besides the certificate refusals
// (PeerError.Reason) and "allow"/"deny".
const (
	ResultAllow = "allow"
	ResultDeny  = "deny"
	// ReasonNoIntentions: no intentions yet (the watch has not answered):
	// nothing can be decided, every peer is refused.
	ReasonNoIntentions = "no_intentions"
)

// NewInbound returns the Inbound of the Connect service service (the
// name in the leaf's SPIFFE ID), with no leaf, roots or rules yet.
func NewInbound(service string) *Inbound { return &Inbound{service: service} }

// Service is the Connect service name the Inbound serves as.
func (in *Inbound) Service() string { return in.service }

// SetLeaf makes c the certificate served from the next handshake on: the
// leaf followed by the intermediates that chain it to its root, with
// c.Leaf parsed (its NotAfter bounds its use). nil serves nothing.
func (in *Inbound) SetLeaf(c *tls.Certificate) { in.leaf.Store(c) }

// Leaf returns the certificate served, nil when none.
func (in *Inbound) Leaf() *tls.Certificate { return in.leaf.Load() }

// SetRoots makes b the trust bundle client certificates are verified
// against from the next handshake on (nil: every peer refused).
func (in *Inbound) SetRoots(b *TrustBundle) { in.verifier.SetBundle(b) }

// SetRules makes r the intentions of the next handshakes and requests
// (nil: every peer refused).
func (in *Inbound) SetRules(r *Rules) { in.rules.Store(r) }

// SetObserver makes f receive every authorization outcome: result (allow,
// deny, or a refusal reason: a PeerError.Reason, ReasonNoIntentions) and
// source (the peer's service name, "" when it has no valid identity). It
// is called once per handshake and once per request decided; f must be
// cheap and safe for concurrent use. nil: none.
func (in *Inbound) SetObserver(f func(result, source string)) {
	if f == nil {
		in.observe.Store(nil)
		return
	}
	in.observe.Store(&f)
}

func (in *Inbound) count(result, source string) {
	if f := in.observe.Load(); f != nil {
		(*f)(result, source)
	}
}

// ErrNoLeaf is returned to a handshake when there is no leaf to serve, or
// it has expired.
var ErrNoLeaf = errors.New("mesh: no valid leaf certificate")

// DeniedError is a connection an L4 intention (or the default) denied at
// the handshake.
type DeniedError struct {
	Source   ServiceID
	Decision Decision
}

func (e *DeniedError) Error() string {
	who := e.Decision.Intention
	if who == "" {
		who = "the default policy"
	}
	return fmt.Sprintf("mesh: connection of %s denied by %s (%s)", e.Source, who, e.Decision.By)
}

// ServerTLS returns a server configuration for a mesh listener: the leaf
// from GetCertificate (whatever the SNI: Connect clients send
// <service>.default.<dc>.internal.<trust-domain>), a client certificate
// requested and checked by VerifyConnection (Go's own verification knows no
// SPIFFE; it runs on resumed handshakes too): chained to a current root
// with the intermediates sent, one Consul service SPIFFE ID in a trusted
// trust domain, and allowed by the intentions at L4. Any failure aborts
// the handshake. The caller sets NextProtos and versions.
func (in *Inbound) ServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion:       tls.VersionTLS12,
		ClientAuth:       tls.RequestClientCert, // a missing one is refused (and counted) in VerifyConnection
		GetCertificate:   in.getCertificate,
		VerifyConnection: in.VerifyConnection,
	}
}

func (in *Inbound) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := in.leaf.Load()
	now := time.Now
	if in.now != nil {
		now = in.now
	}
	if c == nil || c.Leaf == nil || !now().Before(c.Leaf.NotAfter) {
		return nil, ErrNoLeaf
	}
	return c, nil
}

// VerifyConnection verifies a peer at the handshake: its certificate (see
// Verifier.VerifyClient) and its L4 authorization (Rules.AuthorizeConn;
// an L7 intention allows the connection, its requests are decided by
// Authorize). Errors: *PeerError, *DeniedError, or one whose reason is
// ReasonNoIntentions. Each outcome is counted.
func (in *Inbound) VerifyConnection(cs tls.ConnectionState) error {
	id, err := in.verifier.VerifyClient(cs.PeerCertificates)
	if err != nil {
		var pe *PeerError
		reason := ReasonUntrusted
		if errors.As(err, &pe) {
			reason = pe.Reason
		}
		in.count(reason, id.Service)
		return err
	}
	r := in.rules.Load()
	if r == nil {
		in.count(ReasonNoIntentions, id.Service)
		return &PeerError{Reason: ReasonNoIntentions, ID: id, Err: errors.New("no intentions yet")}
	}
	d := r.AuthorizeConn(id)
	if !d.Allow {
		in.count(ResultDeny, id.Service)
		return &DeniedError{Source: id, Decision: d}
	}
	in.count(ResultAllow, id.Service)
	return nil
}

// Authorize decides one request on a mesh connection whose handshake
// state is cs: the peer's identity (its certificate's URI SAN, which the
// handshake verified) against the current intentions, L4 and L7
// (Rules.Authorize), so intention changes reach open connections at their
// next request. path must come from RequestPath. A request without a
// verified peer (cs nil or without a certificate: never on a mesh
// listener) or without intentions is denied. The outcome is counted.
func (in *Inbound) Authorize(cs *tls.ConnectionState, method, host, path string, h http.Header) (ServiceID, Decision) {
	deny := Decision{By: ByDefault, Permission: -1}
	if cs == nil || len(cs.PeerCertificates) == 0 {
		in.count(ReasonNoCertificate, "")
		return ServiceID{}, deny
	}
	id, err := in.ids.lookup(cs.PeerCertificates[0])
	if err != nil {
		in.count(ReasonBadIdentity, "")
		return id, deny
	}
	r := in.rules.Load()
	if r == nil {
		in.count(ReasonNoIntentions, id.Service)
		return id, deny
	}
	req := Request{Method: method, Path: path, Host: host, Header: h}
	d := r.Authorize(id, &req)
	if d.Allow {
		in.count(ResultAllow, id.Service)
	} else {
		in.count(ResultDeny, id.Service)
	}
	return id, d
}

// idCache is a small direct-mapped cache of certificate identities, keyed
// by the *x509.Certificate a connection's state holds (the same pointer
// for every request of a connection, over net/http, x/net/http2 and
// quic-go alike). A hit costs no allocation; a miss parses the URI SAN
// and replaces the slot. At most idSlots certificates are kept alive.
type idCache struct {
	slots [idSlots]atomic.Pointer[idEntry]
}

const idSlots = 256

type idEntry struct {
	cert *x509.Certificate
	id   ServiceID
}

func (c *idCache) lookup(cert *x509.Certificate) (ServiceID, error) {
	var h byte
	if n := len(cert.Signature); n > 0 {
		h = cert.Signature[n-1] // signature bytes are as good as random
	}
	slot := &c.slots[h]
	if e := slot.Load(); e != nil && e.cert == cert {
		return e.id, nil
	}
	id, err := CertServiceID(cert)
	if err == nil {
		slot.Store(&idEntry{cert: cert, id: id})
	}
	return id, err
}

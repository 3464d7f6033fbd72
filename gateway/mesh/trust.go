package mesh

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Root is one CA root as the agent hands it over: the root certificate and
// the intermediates Consul lists with it (after a rotation, the new root
// cross-signed by the old one), PEM each.
type Root struct {
	ID               string
	CertPEM          string
	IntermediatePEMs []string
}

// TrustBundle is an immutable set of Connect CA roots: what a peer's
// certificate must chain to. Build it with [NewTrustBundle]; it is never
// modified after, so it can be shared by every handshake and swapped whole
// (Verifier.SetBundle) when the roots change.
type TrustBundle struct {
	// domains are the accepted trust domains, sorted: the cluster's (the
	// roots reply's TrustDomain) and the one in each root's own URI SAN.
	domains []string
	// primary is the cluster's trust domain: the one given to
	// NewTrustBundle, else the first of domains. Outbound SNI names it.
	primary string
	roots   *x509.CertPool
	// inter holds the intermediates Consul lists with the roots; each
	// verification adds those the peer sent.
	inter *x509.CertPool
	ids   []string
}

// NewTrustBundle builds the bundle of trustDomain (the roots reply's
// TrustDomain) from every current root. Every root is trusted, not only the
// active one: during a rotation leaves signed by the old root are still in
// use (Consul "Root Certificate Rotation"). Errors: no root, a PEM that holds
// no certificate or an unparsable one, an invalid trust domain.
func NewTrustBundle(trustDomain string, roots []Root) (*TrustBundle, error) {
	if len(roots) == 0 {
		return nil, errors.New("mesh: trust bundle: no CA root")
	}
	b := &TrustBundle{roots: x509.NewCertPool(), inter: x509.NewCertPool()}
	if trustDomain != "" {
		if _, err := ParseServiceID("spiffe://" + trustDomain + "/ns/a/dc/b/svc/c"); err != nil {
			return nil, fmt.Errorf("mesh: trust bundle: trust domain %q: %w", trustDomain, err)
		}
		b.domains = append(b.domains, trustDomain)
	}
	for _, r := range roots {
		certs, err := parsePEMCerts(r.CertPEM)
		if err != nil {
			return nil, fmt.Errorf("mesh: trust bundle: root %s: %w", r.ID, err)
		}
		for _, c := range certs {
			b.roots.AddCert(c)
			for _, u := range c.URIs { // a Connect root names its trust domain: spiffe://<td>
				if td, ok := strings.CutPrefix(u.String(), "spiffe://"); ok && td != "" && !strings.Contains(td, "/") {
					b.domains = append(b.domains, td)
				}
			}
		}
		for _, p := range r.IntermediatePEMs {
			certs, err := parsePEMCerts(p)
			if err != nil {
				return nil, fmt.Errorf("mesh: trust bundle: intermediate of root %s: %w", r.ID, err)
			}
			for _, c := range certs {
				b.inter.AddCert(c)
			}
		}
		b.ids = append(b.ids, r.ID)
	}
	slices.Sort(b.domains)
	b.domains = slices.Compact(b.domains)
	if len(b.domains) == 0 {
		return nil, errors.New("mesh: trust bundle: no trust domain (none given, and no root names one)")
	}
	b.primary = cmp.Or(trustDomain, b.domains[0])
	return b, nil
}

// TrustDomains returns the accepted trust domains, sorted.
func (b *TrustBundle) TrustDomains() []string { return slices.Clone(b.domains) }

// TrustDomain returns the cluster's trust domain: the one given to
// NewTrustBundle, else the first (sorted) that a root names.
func (b *TrustBundle) TrustDomain() string { return b.primary }

// RootIDs returns the IDs of the roots, in the order given.
func (b *TrustBundle) RootIDs() []string { return slices.Clone(b.ids) }

func (b *TrustBundle) trusts(td string) bool {
	_, ok := slices.BinarySearch(b.domains, td)
	return ok
}

// parsePEMCerts returns every CERTIFICATE block of s; at least one.
func parsePEMCerts(s string) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := []byte(s)
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate")
	}
	return out, nil
}

// Reasons a peer certificate is refused, in [PeerError.Reason]: a bounded
// set for metric labels ("counted by reason").
const (
	ReasonNoRoots       = "no_roots"       // no trust bundle yet
	ReasonNoCertificate = "no_certificate" // the peer sent none
	ReasonExpired       = "expired"        // outside its validity (or a chain certificate's)
	ReasonUntrusted     = "untrusted"      // does not chain to a current root
	ReasonBadIdentity   = "bad_identity"   // not exactly one URI SAN, not SPIFFE, not a service
	ReasonTrustDomain   = "trust_domain"   // a trust domain the roots do not name
	ReasonWrongService  = "wrong_service"  // a server that is not the service dialled
)

// PeerError is a refused peer certificate.
type PeerError struct {
	// Reason is one of the Reason constants.
	Reason string
	// ID is the peer's identity when it was parsed (ReasonTrustDomain,
	// ReasonWrongService).
	ID  ServiceID
	Err error
}

func (e *PeerError) Error() string {
	if e.Err == nil {
		return "mesh: peer certificate refused: " + e.Reason
	}
	return "mesh: peer certificate refused: " + e.Reason + ": " + e.Err.Error()
}

func (e *PeerError) Unwrap() error { return e.Err }

// Verifier checks Connect peers against the current [TrustBundle], which
// SetBundle swaps atomically: a handshake uses one bundle from start to end
// and the roots can change at any time without a listener restart. The
// zero value has no bundle and refuses every peer (ReasonNoRoots).
type Verifier struct {
	bundle atomic.Pointer[TrustBundle]
	// now returns the verification time; nil is time.Now (tests).
	now func() time.Time
}

// SetBundle makes b the bundle of every later verification; nil refuses
// every peer.
func (v *Verifier) SetBundle(b *TrustBundle) { v.bundle.Store(b) }

// Bundle returns the current bundle, nil when none.
func (v *Verifier) Bundle() *TrustBundle { return v.bundle.Load() }

// VerifyClient verifies a client's certificate chain (leaf first, as sent)
// for a mesh listener: the leaf must chain to a current root through the
// bundle's intermediates and those sent, be valid now for client
// authentication, carry exactly one URI SAN that is a Consul service
// SPIFFE ID, in a trust domain the roots name. It returns that identity.
// Errors are *PeerError.
func (v *Verifier) VerifyClient(chain []*x509.Certificate) (ServiceID, error) {
	return v.verify(chain, x509.ExtKeyUsageClientAuth)
}

// VerifyServer verifies the certificate chain of a server dialled as the
// Connect service want (Service, Datacenter, and Namespace and Partition,
// "" meaning "default"; want.TrustDomain is ignored): as VerifyClient, for
// server authentication, and the identity must be want's service in want's
// datacenter, with a trust domain of the current roots. DNS names are
// ignored. Errors are *PeerError.
func (v *Verifier) VerifyServer(chain []*x509.Certificate, want ServiceID) (ServiceID, error) {
	id, err := v.verify(chain, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return id, err
	}
	if id.Service != want.Service || id.Datacenter != want.Datacenter || id.namespace() != want.namespace() ||
		id.partition() != want.partition() {
		return id, &PeerError{Reason: ReasonWrongService, ID: id,
			Err: fmt.Errorf("the server is %s, want service %s in datacenter %s", id, want.Service, want.Datacenter)}
	}
	return id, nil
}

func (v *Verifier) verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) (ServiceID, error) {
	b := v.bundle.Load()
	if b == nil {
		return ServiceID{}, &PeerError{Reason: ReasonNoRoots, Err: errors.New("no Connect CA roots yet")}
	}
	if len(chain) == 0 || chain[0] == nil {
		return ServiceID{}, &PeerError{Reason: ReasonNoCertificate}
	}
	now := time.Now
	if v.now != nil {
		now = v.now
	}
	inter := b.inter
	if len(chain) > 1 {
		inter = b.inter.Clone()
		for _, c := range chain[1:] {
			if c != nil {
				inter.AddCert(c)
			}
		}
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: b.roots, Intermediates: inter, CurrentTime: now(),
		KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		reason := ReasonUntrusted
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			reason = ReasonExpired
		}
		return ServiceID{}, &PeerError{Reason: reason, Err: err}
	}
	id, err := CertServiceID(chain[0])
	if err != nil {
		return ServiceID{}, &PeerError{Reason: ReasonBadIdentity, Err: err}
	}
	if !b.trusts(id.TrustDomain) {
		return id, &PeerError{Reason: ReasonTrustDomain, ID: id,
			Err: fmt.Errorf("trust domain %q is not one of the roots' %v", id.TrustDomain, b.domains)}
	}
	return id, nil
}

// VerifyClientConnection is a tls.Config.VerifyConnection for a mesh
// listener, with ClientAuth set to tls.RequireAnyClientCert (Go's own
// verification knows no SPIFFE): it runs on every handshake, resumed ones
// included, against the bundle current at that moment. Errors are
// *PeerError; crypto/tls then aborts the handshake.
func (v *Verifier) VerifyClientConnection(cs tls.ConnectionState) error {
	_, err := v.VerifyClient(cs.PeerCertificates)
	return err
}

// VerifyClientCertificate is the same check as a
// tls.Config.VerifyPeerCertificate (raw DER certificates, leaf first).
// Go does not call VerifyPeerCertificate on resumed sessions: prefer
// VerifyClientConnection.
func (v *Verifier) VerifyClientCertificate(raw [][]byte, _ [][]*x509.Certificate) error {
	chain, err := parseRaw(raw)
	if err != nil {
		return err
	}
	_, err = v.VerifyClient(chain)
	return err
}

// ServerCheck returns a tls.Config.VerifyConnection for a client dialling
// the Connect service want (see VerifyServer), to set with
// InsecureSkipVerify (which turns off only Go's DNS-name verification, that
// this check replaces).
func (v *Verifier) ServerCheck(want ServiceID) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		_, err := v.VerifyServer(cs.PeerCertificates, want)
		return err
	}
}

func parseRaw(raw [][]byte) ([]*x509.Certificate, error) {
	chain := make([]*x509.Certificate, 0, len(raw))
	for _, der := range raw {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, &PeerError{Reason: ReasonUntrusted, Err: err}
		}
		chain = append(chain, c)
	}
	return chain, nil
}

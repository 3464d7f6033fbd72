package mesh

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strings"
)

// Outbound dialling (issue 23 item 4): the gateway as a Connect client of
// another service's instances (its sidecars or Connect-native instances),
// under the identity of an Inbound (the same leaf and roots its mesh
// listeners use).

// ALPN protocol lists for Outbound.
var (
	// ALPNHTTP1 offers HTTP/1.1 only: an upstream whose protocol is
	// "http" (Consul's built-in proxy negotiates no ALPN at all, which
	// Outbound accepts).
	ALPNHTTP1 = []string{"http/1.1"}
	// ALPNH2 offers HTTP/2 only: an upstream whose protocol is "http2" or
	// "grpc".
	ALPNH2 = []string{"h2"}
)

// Outbound dials instances of one Connect service with mTLS. It holds no
// state of its own: every handshake reads the Inbound's current leaf and
// roots, so rotations apply to the next connection. Safe for concurrent
// use.
type Outbound struct {
	in   *Inbound
	want ServiceID
	alpn []string
}

// Outbound returns the dialler of the Connect service want (Service
// required; Datacenter "" for the gateway's own, read from its leaf's
// SPIFFE ID at each handshake; Namespace and Partition "" for "default";
// TrustDomain ignored: any trust domain of the current roots is
// accepted), offering the ALPN protocols alpn (ALPNHTTP1 or ALPNH2).
func (in *Inbound) Outbound(want ServiceID, alpn []string) *Outbound {
	want.TrustDomain = ""
	return &Outbound{in: in, want: want, alpn: slices.Clone(alpn)}
}

// Target is the service the Outbound dials, with the datacenter of the
// current leaf when it was given none ("" before a leaf).
func (o *Outbound) Target() ServiceID {
	w := o.want
	if w.Datacenter == "" {
		if c := o.in.leaf.Load(); c != nil && c.Leaf != nil {
			if id, err := CertServiceID(c.Leaf); err == nil {
				w.Datacenter = id.Datacenter
			}
		}
	}
	return w
}

// ServerName is the SNI sent to an instance, as Consul's proxies name an
// upstream: "<service>.<namespace>.<dc>.internal.<trust-domain>" (with a
// partition other than default: "<service>.<namespace>.<partition>.<dc>.
// internal-v1.<trust-domain>"), the trust domain the current roots'. ""
// before the roots are known.
func (o *Outbound) ServerName() string {
	b := o.in.verifier.Bundle()
	if b == nil {
		return ""
	}
	w := o.Target()
	parts := []string{w.Service, w.namespace()}
	if p := w.partition(); p != "default" {
		parts = append(parts, p, w.Datacenter, "internal-v1", b.TrustDomain())
	} else {
		parts = append(parts, w.Datacenter, "internal", b.TrustDomain())
	}
	return strings.ToLower(strings.Join(parts, "."))
}

// ClientTLS returns a new client configuration for one handshake with an
// instance of the target service:
//   - Certificate: the Inbound's leaf, through GetClientCertificate (the
//     leaf current at the handshake); ErrNoLeaf when there is none or it
//     has expired.
//   - Verification: InsecureSkipVerify turns off Go's own verification
//     only, which checks DNS names and IP SANs against ServerName, which
//     Connect certificates do not carry usefully; VerifyConnection
//     (Verifier.VerifyServer, run on every handshake, resumed ones
//     included) replaces it: the chain must lead to a current root, and
//     the URI SAN must be exactly spiffe://<td>/ns/<ns>/dc/<dc>/svc/<service>
//     of the target, td a trust domain of the roots. Errors are
//     *PeerError.
//   - ServerName: ServerName(); NextProtos: the Outbound's ALPN list.
//   - TLS 1.2 at least; no session resumption (no ClientSessionCache, and
//     tickets disabled): each connection is verified afresh.
func (o *Outbound) ClientTLS() *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS12,
		ServerName:             o.ServerName(),
		NextProtos:             slices.Clone(o.alpn),
		InsecureSkipVerify:     true, // replaced by VerifyConnection, see above
		VerifyConnection:       o.in.verifier.ServerCheck(o.Target()),
		GetClientCertificate:   o.clientCertificate,
		SessionTicketsDisabled: true,
	}
}

// clientCertificate is the leaf, as a mesh listener serves it (ErrNoLeaf
// when there is none or it has expired).
func (o *Outbound) clientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return o.in.getCertificate(nil)
}

// Handshake runs the client handshake on raw (a connection to an
// instance) with ClientTLS and returns the TLS connection; it implements
// gateway/transport.Handshaker. crypto/tls refuses a server that selects
// an ALPN protocol not offered; one that selects none (Consul's built-in
// proxy) is accepted, and the caller decides what to speak. Without a
// valid leaf it fails with ErrNoLeaf before sending a byte. On error raw
// is closed; the error is ErrNoLeaf, a *PeerError from verification, or
// crypto/tls's (an alert, a timeout of ctx).
func (o *Outbound) Handshake(ctx context.Context, raw net.Conn) (*tls.Conn, error) {
	if _, err := o.in.getCertificate(nil); err != nil {
		raw.Close()
		return nil, err
	}
	c := tls.Client(raw, o.ClientTLS())
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return c, nil
}

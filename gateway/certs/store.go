// Package certs owns a listener's TLS material: the certificates it serves,
// chosen by SNI, and the client-certificate policy. One Store is the
// *tls.Config source of every ingress of a listener (QUIC and TCP read the
// same one through GetConfigForClient), so the protocols can never disagree
// on which certificate is served or who is let in (architecture.md, "Request
// pipeline"). A Store is immutable: a reload builds a new one. It knows
// nothing of files or HCL; the agent loads the PEM material.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"time"
)

// ClientAuth is a listener's client-certificate policy.
type ClientAuth int

const (
	// ClientAuthNone asks for no client certificate (tls.NoClientCert).
	ClientAuthNone ClientAuth = iota
	// ClientAuthRequest asks for one: a client without a certificate is
	// served, one whose certificate does not verify against the client CAs
	// fails the handshake (tls.VerifyClientCertIfGiven).
	ClientAuthRequest
	// ClientAuthRequire fails the handshake of every client without a
	// certificate that verifies against the client CAs
	// (tls.RequireAndVerifyClientCert).
	ClientAuthRequire
)

var clientAuthNames = [...]string{"none", "request", "require"}

// String is the configuration word: "none", "request" or "require".
func (c ClientAuth) String() string {
	if c < 0 || int(c) >= len(clientAuthNames) {
		return fmt.Sprintf("ClientAuth(%d)", int(c))
	}
	return clientAuthNames[c]
}

// ParseClientAuth reads "none", "request" or "require"; anything else is an
// error naming the accepted words.
func ParseClientAuth(s string) (ClientAuth, error) {
	for i, n := range clientAuthNames {
		if s == n {
			return ClientAuth(i), nil
		}
	}
	return ClientAuthNone, fmt.Errorf("certs: client auth %q: want one of none, request, require", s)
}

// tlsClientAuth maps the policy onto crypto/tls.
func (c ClientAuth) tlsClientAuth() tls.ClientAuthType {
	switch c {
	case ClientAuthRequest:
		return tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// Config is what a Store is built from.
type Config struct {
	// Default is served when no certificate of Certificates covers the name
	// the client asked for (SNI), and when it sent none (an IP literal, an
	// old client). Certificate must hold at least the leaf; Leaf is parsed
	// from it when nil.
	Default tls.Certificate
	// Certificates are chosen by the DNS names in their leaf's Subject
	// Alternative Names (exact names, and "*.suffix" wildcards covering one
	// label). Each needs at least one DNS SAN: without one it could never be
	// chosen. When several cover a name, the first whose key the client
	// supports (tls.ClientHelloInfo.SupportsCertificate, e.g. ECDSA and RSA
	// side by side) is served, else the first.
	Certificates []tls.Certificate
	// ClientAuth is the client-certificate policy (default ClientAuthNone).
	ClientAuth ClientAuth
	// ClientCAs verify client certificates; required unless ClientAuth is
	// ClientAuthNone.
	ClientCAs *x509.CertPool
}

// DefaultName is the Expiries key of Config.Default.
const DefaultName = "default"

// CertificateError is a certificate New cannot use. Index is its position
// in Config.Certificates, or -1 for Config.Default.
type CertificateError struct {
	Index  int
	Reason string
}

// Error implements error.
func (e *CertificateError) Error() string {
	if e.Index < 0 {
		return "certs: default certificate: " + e.Reason
	}
	return fmt.Sprintf("certs: certificate %d: %s", e.Index+1, e.Reason)
}

// Store serves a listener's certificates by SNI and holds its client
// policy. Build it with New; it is safe for concurrent use and never
// changes.
type Store struct {
	def        *tls.Certificate
	exact      map[string][]*tls.Certificate // lower-case DNS SAN → certificates
	wildcard   map[string][]*tls.Certificate // "b.test" for a "*.b.test" SAN
	clientAuth ClientAuth
	clientCAs  *x509.CertPool
	expiries   map[string]time.Time
}

// New checks cfg and indexes its certificates by name. Errors: a
// *CertificateError for a certificate without a leaf (or one that does not
// parse) or, in Certificates, without a DNS SAN; an unknown ClientAuth; a
// ClientAuth other than none without ClientCAs.
func New(cfg Config) (*Store, error) {
	if cfg.ClientAuth < ClientAuthNone || cfg.ClientAuth > ClientAuthRequire {
		return nil, fmt.Errorf("certs: unknown client auth %d", int(cfg.ClientAuth))
	}
	if cfg.ClientAuth != ClientAuthNone && cfg.ClientCAs == nil {
		return nil, fmt.Errorf("certs: client auth %q needs client CAs", cfg.ClientAuth)
	}
	s := &Store{
		exact: map[string][]*tls.Certificate{}, wildcard: map[string][]*tls.Certificate{},
		clientAuth: cfg.ClientAuth, clientCAs: cfg.ClientCAs, expiries: map[string]time.Time{},
	}
	def, err := withLeaf(cfg.Default, -1)
	if err != nil {
		return nil, err
	}
	s.def = def
	s.expiries[DefaultName] = def.Leaf.NotAfter
	for i, c := range cfg.Certificates {
		cert, err := withLeaf(c, i)
		if err != nil {
			return nil, err
		}
		if len(cert.Leaf.DNSNames) == 0 {
			return nil, &CertificateError{Index: i, Reason: "no DNS name in its Subject Alternative Names, so no SNI name selects it"}
		}
		s.index(cert)
		name := strings.ToLower(cert.Leaf.DNSNames[0])
		if t, ok := s.expiries[name]; !ok || cert.Leaf.NotAfter.Before(t) {
			s.expiries[name] = cert.Leaf.NotAfter
		}
	}
	// The default takes part in the name match after the others: its own
	// exact name beats another certificate's wildcard.
	s.index(def)
	return s, nil
}

func withLeaf(c tls.Certificate, i int) (*tls.Certificate, error) {
	if len(c.Certificate) == 0 {
		return nil, &CertificateError{Index: i, Reason: "no certificate"}
	}
	if c.Leaf == nil {
		leaf, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			return nil, &CertificateError{Index: i, Reason: strings.TrimPrefix(err.Error(), "x509: ")}
		}
		c.Leaf = leaf
	}
	return &c, nil
}

func (s *Store) index(c *tls.Certificate) {
	for _, n := range c.Leaf.DNSNames {
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		if suffix, ok := strings.CutPrefix(n, "*."); ok {
			s.wildcard[suffix] = append(s.wildcard[suffix], c)
		} else if n != "" {
			s.exact[n] = append(s.exact[n], c)
		}
	}
}

// Certificate returns the certificate for a handshake whose ClientHello
// asked for serverName (SNI; "" when none): a certificate with that exact
// DNS SAN, else one whose "*.suffix" SAN covers it (one label: "*.b.test"
// covers "x.b.test", not "b.test" or "y.x.b.test"), else the default.
// Names compare case-insensitively, a trailing dot ignored. hello may be
// nil; it picks among several candidates by what the client supports.
func (s *Store) Certificate(serverName string, hello *tls.ClientHelloInfo) *tls.Certificate {
	name := strings.ToLower(strings.TrimSuffix(serverName, "."))
	if name == "" {
		return s.def
	}
	cands := s.exact[name]
	if cands == nil {
		if i := strings.IndexByte(name, '.'); i > 0 {
			cands = s.wildcard[name[i+1:]]
		}
	}
	switch {
	case len(cands) == 0:
		return s.def
	case len(cands) == 1 || hello == nil:
		return cands[0]
	}
	for _, c := range cands {
		if hello.SupportsCertificate(c) == nil {
			return c
		}
	}
	return cands[0]
}

// GetCertificate is the tls.Config.GetCertificate of ServerConfig. It
// never fails: an unknown name or none gets the default certificate.
func (s *Store) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.Certificate(hello.ServerName, hello), nil
}

// ServerConfig returns a new server configuration that serves the Store's
// certificates by SNI and enforces its client policy, negotiating TLS
// minVersion (tls.VersionTLS12, ...) or later. QUIC always negotiates TLS
// 1.3 whatever minVersion says. Every call returns a distinct Config with
// its own session ticket keys, so tickets issued under a previous Store
// (another client CA, say) are not resumed after a reload.
func (s *Store) ServerConfig(minVersion uint16) *tls.Config {
	return &tls.Config{
		MinVersion:     minVersion,
		GetCertificate: s.GetCertificate,
		ClientAuth:     s.clientAuth.tlsClientAuth(),
		ClientCAs:      s.clientCAs,
	}
}

// ClientAuth is the Store's client-certificate policy.
func (s *Store) ClientAuth() ClientAuth { return s.clientAuth }

// Expiries returns each certificate's NotAfter by name: DefaultName for
// Config.Default, the first DNS SAN (lower-cased) for the others; when two
// share that name, the earlier NotAfter. The map is a copy.
func (s *Store) Expiries() map[string]time.Time {
	m := make(map[string]time.Time, len(s.expiries))
	for k, v := range s.expiries {
		m[k] = v
	}
	return m
}

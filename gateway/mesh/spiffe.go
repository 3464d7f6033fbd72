package mesh

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ServiceID is the identity of a Consul Connect service: the SPIFFE ID
// spiffe://<TrustDomain>[/ap/<Partition>]/ns/<Namespace>/dc/<Datacenter>/svc/<Service>
// (Consul "Connect → Security → Certificates"; the /ap/ segment exists only
// for a partition other than "default", Consul Enterprise).
type ServiceID struct {
	// TrustDomain is the SPIFFE trust domain, lower case, e.g.
	// "11111111-2222-3333-4444-555555555555.consul".
	TrustDomain string
	// Partition is the admin partition; "" is "default".
	Partition string
	// Namespace is the Consul namespace; "default" in Consul CE.
	Namespace string
	// Datacenter and Service name the service.
	Datacenter string
	Service    string
}

// String returns the SPIFFE ID as a URI, without the /ap/ segment for the
// default partition, as Consul writes it.
func (id ServiceID) String() string {
	var b strings.Builder
	b.WriteString("spiffe://")
	b.WriteString(id.TrustDomain)
	if p := id.partition(); p != "default" {
		b.WriteString("/ap/" + p)
	}
	b.WriteString("/ns/" + id.namespace() + "/dc/" + id.Datacenter + "/svc/" + id.Service)
	return b.String()
}

func (id ServiceID) partition() string { return orDefault(id.Partition) }
func (id ServiceID) namespace() string { return orDefault(id.Namespace) }

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}

// Errors of [ParseServiceID] and [CertServiceID], wrapped in an *IDError.
var (
	// ErrNotSPIFFE: the URI is not a valid SPIFFE ID (SPIFFE-ID spec §2:
	// scheme "spiffe", a trust domain of [a-z0-9._-], no port, user info,
	// query or fragment; path segments of [a-zA-Z0-9._-], none empty, "."
	// or ".."; at most 2048 bytes).
	ErrNotSPIFFE = errors.New("not a SPIFFE ID")
	// ErrNotService: a SPIFFE ID, but not a Consul service's (an agent,
	// server, mesh gateway or CA identity, or another path).
	ErrNotService = errors.New("not a Consul service identity")
	// ErrURISANs: the certificate has no URI SAN or several (an X.509-SVID
	// has exactly one, SPIFFE X509-SVID spec §2).
	ErrURISANs = errors.New("not exactly one URI SAN")
)

// IDError is a refused identity: the URI (truncated) and why.
type IDError struct {
	URI string
	Err error // ErrNotSPIFFE, ErrNotService or ErrURISANs
	// Detail says what in particular, e.g. "uppercase in the trust domain".
	Detail string
}

func (e *IDError) Error() string {
	s := "mesh: " + e.Err.Error()
	if e.URI != "" {
		s += fmt.Sprintf(" %q", e.URI)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *IDError) Unwrap() error { return e.Err }

// maxSPIFFELen is the longest SPIFFE ID accepted (SPIFFE-ID spec §2.3).
const maxSPIFFELen = 2048

// ParseServiceID parses a Consul service SPIFFE ID. Errors are *IDError
// wrapping ErrNotSPIFFE (not a valid SPIFFE ID) or ErrNotService (a SPIFFE ID
// of something else: spiffe://<td>/agent/client/dc/<dc>/id/<node>,
// /agent/server/dc/<dc>, /gateway/mesh/dc/<dc>, the bare trust domain of a
// CA certificate, ...).
func ParseServiceID(uri string) (ServiceID, error) {
	fail := func(err error, detail string) (ServiceID, error) {
		return ServiceID{}, &IDError{URI: truncate(uri, 200), Err: err, Detail: detail}
	}
	if len(uri) > maxSPIFFELen {
		return fail(ErrNotSPIFFE, "longer than 2048 bytes")
	}
	rest, ok := strings.CutPrefix(uri, "spiffe://")
	if !ok {
		return fail(ErrNotSPIFFE, `the scheme is not "spiffe://"`)
	}
	td, path, _ := strings.Cut(rest, "/")
	if td == "" {
		return fail(ErrNotSPIFFE, "empty trust domain")
	}
	for i := 0; i < len(td); i++ {
		if c := td[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return fail(ErrNotSPIFFE, fmt.Sprintf("byte %q in the trust domain", c))
		}
	}
	if path == "" {
		return fail(ErrNotService, "a trust domain alone (a CA's identity)")
	}
	segs := strings.Split(path, "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return fail(ErrNotSPIFFE, "an empty, \".\" or \"..\" path segment")
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
				return fail(ErrNotSPIFFE, fmt.Sprintf("byte %q in the path", c))
			}
		}
	}
	id := ServiceID{TrustDomain: td}
	if len(segs) == 8 && segs[0] == "ap" {
		id.Partition, segs = segs[1], segs[2:]
	}
	if len(segs) != 6 || segs[0] != "ns" || segs[2] != "dc" || segs[4] != "svc" {
		return fail(ErrNotService, "the path is not [/ap/<partition>]/ns/<namespace>/dc/<datacenter>/svc/<service>")
	}
	id.Namespace, id.Datacenter, id.Service = segs[1], segs[3], segs[5]
	if id.Partition == "default" {
		id.Partition = ""
	}
	return id, nil
}

// CertServiceID returns the Consul service identity of a certificate: its
// one URI SAN, parsed by [ParseServiceID]. DNS names, IP addresses and the
// subject are ignored. Errors are *IDError: ErrURISANs when the certificate
// has no URI SAN or more than one, else ParseServiceID's.
func CertServiceID(cert *x509.Certificate) (ServiceID, error) {
	if len(cert.URIs) != 1 {
		return ServiceID{}, &IDError{Err: ErrURISANs, Detail: fmt.Sprintf("%d URI SANs", len(cert.URIs))}
	}
	return ParseServiceID(uriString(cert.URIs[0]))
}

// uriString is u as it was written in the certificate, as near as
// url.URL allows: Go parsed the SAN with url.Parse.
func uriString(u *url.URL) string { return u.String() }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

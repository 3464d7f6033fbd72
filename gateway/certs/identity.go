package certs

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"strings"
)

// Identity is a client's verified certificate, as the gateway reports it
// to backends (X-Forwarded-Client-Cert) and logs.
type Identity struct {
	// Hash is the SHA-256 digest of the leaf's DER encoding, lower-case hex.
	Hash string
	// Subject is the leaf's subject in RFC 4514 form (pkix.Name.String:
	// "CN=client,O=Example").
	Subject string
	// URIs and DNSNames are the leaf's URI and DNS Subject Alternative
	// Names, in certificate order.
	URIs, DNSNames []string
}

// VerifiedIdentity returns the identity of the client certificate of cs,
// only when the handshake verified it against the client CAs
// (VerifiedChains non-empty): a certificate sent to a listener that does
// not ask for one is never an identity. cs may be nil (cleartext).
func VerifiedIdentity(cs *tls.ConnectionState) (Identity, bool) {
	if cs == nil || len(cs.VerifiedChains) == 0 {
		return Identity{}, false
	}
	return PeerIdentity(cs)
}

// PeerIdentity returns the identity of the client certificate of cs
// without asking whether Go verified it: for a listener whose own
// VerifyConnection did (a mesh listener: VerifiedChains stays empty
// there). cs may be nil.
func PeerIdentity(cs *tls.ConnectionState) (Identity, bool) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return Identity{}, false
	}
	leaf := cs.PeerCertificates[0]
	sum := sha256.Sum256(leaf.Raw)
	id := Identity{Hash: hex.EncodeToString(sum[:]), Subject: leaf.Subject.String(), DNSNames: leaf.DNSNames}
	for _, u := range leaf.URIs {
		id.URIs = append(id.URIs, u.String())
	}
	return id, true
}

// XFCC renders the identity as one element of Envoy's
// X-Forwarded-Client-Cert header (Envoy docs, "HTTP header manipulation",
// x-forwarded-client-cert): `Hash=<hex>;Subject="<subject>"` followed by a
// `URI=` pair per URI SAN and a `DNS=` pair per DNS SAN, separated by ";".
// Subject is always double-quoted; another value is quoted when it holds
// ",", ";" or "=", with any `"` inside escaped as `\"`. Control characters
// (never valid in a header field) are written as RFC 4514 `\XX` escapes.
// By (the proxy's own URI SAN), Cert and Chain are not sent.
func (id Identity) XFCC() string {
	var b strings.Builder
	b.WriteString("Hash=")
	b.WriteString(id.Hash)
	b.WriteString(";Subject=")
	writeValue(&b, id.Subject, true, true)
	for _, u := range id.URIs {
		b.WriteString(";URI=")
		writeValue(&b, u, false, false)
	}
	for _, d := range id.DNSNames {
		b.WriteString(";DNS=")
		writeValue(&b, d, false, false)
	}
	return b.String()
}

// writeValue writes one XFCC value. escaped says v already escapes its
// quotes (pkix.Name.String writes `"` as `\"`).
func writeValue(b *strings.Builder, v string, quote, escaped bool) {
	quote = quote || strings.ContainsAny(v, ",;=")
	if quote {
		b.WriteByte('"')
	}
	const hexDigits = "0123456789ABCDEF"
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c < 0x20 || c == 0x7f:
			b.WriteByte('\\')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		case c == '"' && quote && !escaped:
			b.WriteString(`\"`)
		default:
			b.WriteByte(c)
		}
	}
	if quote {
		b.WriteByte('"')
	}
}

package hcl

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// TLSFileError is a problem with a file named by a tls block, as returned by
// LoadKeyPair and LoadCertPool.
type TLSFileError struct {
	// Field is the argument that names the file: "cert_file", "key_file" or
	// "ca_file".
	Field string
	// Path is the file as configured.
	Path string
	// Reason says what is wrong, without a "tls: " or "x509: " prefix, e.g.
	// "does not match the certificate in cert_file".
	Reason string
}

// Error implements error: `FIELD "PATH": REASON`.
func (e *TLSFileError) Error() string {
	return fmt.Sprintf("%s %q: %s", e.Field, e.Path, e.Reason)
}

// LoadKeyPair reads a PEM certificate chain from certFile and its private
// key from keyFile, as tls.LoadX509KeyPair does, with errors that name the
// file at fault: certFile must hold at least one CERTIFICATE block and every
// one must parse (crypto/x509); keyFile must hold a PKCS #1, PKCS #8 or SEC 1
// key whose public half is the first certificate's. The result has Leaf set.
// Errors are *TLSFileError. Load, Parse and the agent use it alike, so a
// file is judged the same by validate, at start and on reload.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	certPEM, err := readTLSFile("cert_file", certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	if _, err := parseCertificates("cert_file", certFile, certPEM); err != nil {
		return tls.Certificate{}, err
	}
	keyPEM, err := readTLSFile("key_file", keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// The certificates parsed above, so the problem is the key.
		reason := trimLibPrefix(err)
		switch {
		case strings.Contains(reason, "does not match public key"):
			reason = "the private key does not match the certificate in cert_file"
		case strings.Contains(reason, "failed to find any PEM data"):
			reason = "no PEM data; a key file holds a \"-----BEGIN ... PRIVATE KEY-----\" block"
		case strings.Contains(reason, "found a certificate rather than a key"):
			reason = "holds a certificate, not a private key (are cert_file and key_file swapped?)"
		}
		return tls.Certificate{}, &TLSFileError{Field: "key_file", Path: keyFile, Reason: reason}
	}
	if cert.Leaf == nil {
		cert.Leaf, _ = x509.ParseCertificate(cert.Certificate[0])
	}
	return cert, nil
}

// LoadCertPool reads a PEM bundle of CA certificates (ca_file): at least one
// CERTIFICATE block, each of which must parse. Errors are *TLSFileError.
func LoadCertPool(caFile string) (*x509.CertPool, error) {
	data, err := readTLSFile("ca_file", caFile)
	if err != nil {
		return nil, err
	}
	certs, err := parseCertificates("ca_file", caFile, data)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

func readTLSFile(field, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &TLSFileError{Field: field, Path: path, Reason: "cannot read: " + unwrapPathError(err).Error()}
	}
	return data, nil
}

// parseCertificates decodes every CERTIFICATE block of a PEM file.
func parseCertificates(field, path string, data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	var others []string
	for n := 1; ; {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			others = append(others, block.Type)
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, &TLSFileError{Field: field, Path: path, Reason: fmt.Sprintf("certificate %d does not parse: %s", n, trimLibPrefix(err))}
		}
		certs = append(certs, c)
		n++
	}
	if len(certs) > 0 {
		return certs, nil
	}
	reason := "no PEM data; a certificate file holds \"-----BEGIN CERTIFICATE-----\" blocks"
	switch {
	case field == "cert_file" && len(others) > 0 && strings.HasSuffix(others[0], "PRIVATE KEY"):
		reason = "holds a private key, not a certificate (are cert_file and key_file swapped?)"
	case len(others) > 0:
		reason = fmt.Sprintf("no CERTIFICATE block (found %s)", strings.Join(others, ", "))
	}
	return nil, &TLSFileError{Field: field, Path: path, Reason: reason}
}

// trimLibPrefix drops the "tls: " or "x509: " prefix of crypto errors, so a
// message never reads "tls: tls: ...".
func trimLibPrefix(err error) string {
	s := err.Error()
	for _, p := range []string{"tls: ", "x509: "} {
		s = strings.TrimPrefix(s, p)
	}
	return s
}

// keyPair checks the certificate and key a tls block names (both already
// found to be regular files) with LoadKeyPair, reporting an error at the
// attribute of the file at fault and a warning for a certificate outside
// its validity period. It returns the leaf, nil when the pair is unusable.
func (b blk) keyPair(certAttr, keyAttr *hcl2.Attribute, certFile, keyFile string) *x509.Certificate {
	cert, err := LoadKeyPair(certFile, keyFile)
	if err != nil {
		b.tlsError(err, map[string]*hcl2.Attribute{"cert_file": certAttr, "key_file": keyAttr})
		return nil
	}
	leaf := cert.Leaf
	if leaf == nil {
		return nil
	}
	t := time.Now()
	switch {
	case t.After(leaf.NotAfter):
		b.add(hcl2.DiagWarning, b.subject(certAttr), "Expired certificate",
			fmt.Sprintf("%s: %q (%s) expired at %s; peers will reject it.", b.field("cert_file"), certFile, certName(leaf), leaf.NotAfter.UTC().Format(time.RFC3339)))
	case t.Before(leaf.NotBefore):
		b.add(hcl2.DiagWarning, b.subject(certAttr), "Certificate not yet valid",
			fmt.Sprintf("%s: %q (%s) is valid only from %s; peers will reject it until then.", b.field("cert_file"), certFile, certName(leaf), leaf.NotBefore.UTC().Format(time.RFC3339)))
	}
	return leaf
}

// caFile checks a ca_file (already found to be a regular file) with
// LoadCertPool.
func (b blk) caFile(a *hcl2.Attribute, path string) {
	if _, err := LoadCertPool(path); err != nil {
		b.tlsError(err, map[string]*hcl2.Attribute{"ca_file": a})
	}
}

func (b blk) tlsError(err error, attrs map[string]*hcl2.Attribute) {
	var fe *TLSFileError
	if !errors.As(err, &fe) {
		b.blockErrorf("Invalid TLS material", "%s.", trimLibPrefix(err))
		return
	}
	summary := map[string]string{"cert_file": "Invalid certificate", "key_file": "Invalid private key", "ca_file": "Invalid CA file"}[fe.Field]
	b.errorf(attrs[fe.Field], fe.Field, summary, "%q: %s.", fe.Path, fe.Reason)
}

// certName names a certificate in a message: its first DNS or IP SAN, else
// its subject.
func certName(c *x509.Certificate) string {
	switch {
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	case len(c.IPAddresses) > 0:
		return c.IPAddresses[0].String()
	}
	return c.Subject.String()
}

package discovery

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
)

// Hints added to a failed query's error (and so to the watch status, the
// log and the agent's /v1/ready) when the cause is a TLS or scheme
// mismatch between the configuration and the Consul agent. The names are
// the consul block's (README "Consul discovery") and the Consul CLI's
// environment variables.
const (
	hintClientCert = "Consul asked for a client certificate, as it does with verify_incoming on, and none is configured: " +
		"set consul.tls cert_file and key_file, or CONSUL_CLIENT_CERT and CONSUL_CLIENT_KEY"
	hintUnknownCA = "Consul's certificate is not signed by a trusted CA: consul.tls ca_file, or CONSUL_CACERT, " +
		"must hold the CA that signed it; without either the system roots are used"
	hintHostname = "Consul's certificate does not name the address dialled: set consul.tls server_name, " +
		"or CONSUL_TLS_SERVER_NAME, to a name it holds, such as server.<datacenter>.consul"
	hintHTTPToHTTPS = "this is an HTTPS port: use an https:// address, scheme = \"https\" or CONSUL_HTTP_SSL=true"
	hintHTTPSToHTTP = "this port does not speak TLS: use an http:// address, or Consul's HTTPS port"
)

// watchCertRequests makes tc record, in c.certAsked, that a Consul server
// asked for a client certificate while tc has none to give; it still sends
// none, as Go's TLS client does without the callback. Consul asks only
// with verify_incoming on, and then closes the connection after the
// handshake (TLS 1.3), which the HTTP client reports as a TLS alert, a
// broken pipe, an EOF or "http2: client conn could not be established":
// the record lets hint name the cause of such a failure (and not of a
// refused connection or a timeout, say while the agent restarts).
func (c *Client) watchCertRequests(tc *tls.Config) {
	if tc == nil || len(tc.Certificates) != 0 || tc.GetClientCertificate != nil {
		return
	}
	tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		c.certAsked.Store(true)
		return &tls.Certificate{}, nil
	}
}

// hint returns what to change when qe was caused by a TLS or scheme
// mismatch with the Consul agent, "" otherwise.
func (c *Client) hint(qe *queryError) string {
	var (
		unknownAuth x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		recordErr   tls.RecordHeaderError
	)
	switch {
	case qe.status == http.StatusBadRequest && strings.Contains(qe.err.Error(), "HTTP request to an HTTPS server"):
		return hintHTTPToHTTPS
	case qe.status != 0:
		return ""
	case errors.As(qe.err, &unknownAuth):
		return hintUnknownCA
	case errors.As(qe.err, &hostErr):
		return hintHostname
	case errors.As(qe.err, &recordErr), strings.Contains(qe.err.Error(), "server gave HTTP response to HTTPS client"):
		return hintHTTPSToHTTP
	case c.certAsked.Load() && qe.reason == reasonTransport && closedByPeer(qe.err):
		return hintClientCert
	}
	return ""
}

// closedByPeer reports whether err is the server ending the connection
// (a TLS alert, a reset, a broken pipe, an EOF) rather than not answering
// (connection refused, a timeout, a failed lookup): what a refused client
// certificate looks like once the TLS 1.3 handshake has completed.
func closedByPeer(err error) bool {
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	s := err.Error()
	for _, m := range []string{"remote error: tls: ", "broken pipe", "connection reset by peer", "EOF",
		"http2: client conn could not be established"} {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

package testbackend

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// MTLS is an HTTP/2-over-TLS backend as a strict service-mesh peer runs
// one: it requires a client certificate that its CA signed
// (tls.RequireAndVerifyClientCert) and accepts only handshakes whose SNI
// is its name (GetConfigForClient refuses any other, with a TLS alert).
// Requests it serves get the client certificate's common name in the
// X-Client-CN response header.
type MTLS struct {
	*httptest.Server
	mu   sync.Mutex
	snis []string // every ClientHello's server name, "" for none
}

// NewMTLS starts an MTLS backend serving h with cert (which should name
// sni), trusting client certificates signed by clientCAs; closed at the
// test's end.
func NewMTLS(t testing.TB, h http.Handler, cert tls.Certificate, clientCAs *x509.CertPool, sni string) *MTLS {
	t.Helper()
	m := &MTLS{}
	m.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			w.Header().Set("X-Client-CN", r.TLS.PeerCertificates[0].Subject.CommonName)
		}
		h.ServeHTTP(w, r)
	}))
	m.EnableHTTP2 = true
	m.TLS = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
		MinVersion:   tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			m.mu.Lock()
			m.snis = append(m.snis, hello.ServerName)
			m.mu.Unlock()
			if hello.ServerName != sni {
				return nil, fmt.Errorf("testbackend: SNI %q, want %q", hello.ServerName, sni)
			}
			return nil, nil // the server's own configuration
		},
	}
	m.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	m.StartTLS()
	t.Cleanup(m.Close)
	return m
}

// SNIs returns the server names of every handshake so far, in order.
func (m *MTLS) SNIs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.snis...)
}

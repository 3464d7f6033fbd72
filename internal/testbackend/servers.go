// Package testbackend holds the backend doubles the gateway's tests run
// against: net/http test servers for each backend protocol, and doubles
// that stall, count, flap, echo WebSocket messages or misbehave below
// net/http at the frame level. One package, so that a double is written
// once and every test of a misbehaviour uses the same one. It is imported
// only by tests (TestTestOnlyPackages).
package testbackend

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// NewH1 is an HTTP/1.1 backend (cleartext), closed at the test's end.
func NewH1(t testing.TB, h http.Handler) *httptest.Server {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// NewH2 is an HTTP/2-over-TLS backend, closed at the test's end; its
// certificate is the server's (a client trusts s.Certificate()).
func NewH2(t testing.TB, h http.Handler) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// NewH2C is a cleartext HTTP/2 backend that speaks nothing else: a
// net/http server whose only protocol is UnencryptedHTTP2 (prior
// knowledge, RFC 9113 §3.3), so an HTTP/1.1 request would fail.
func NewH2C(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Start()
	t.Cleanup(s.Close)
	return s
}

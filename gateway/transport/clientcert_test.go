package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/impulse-agent/impulse-agent/internal/testpki"
)

// TestClientCertificateRefusalIsATLSFailure: a TLS 1.3 backend that
// requires a client certificate refuses the handshake only after the
// client's side of it completed. Whatever x/net/http2 meets first (the
// alert, a broken pipe, a connection closed before the request's stream),
// every request fails at once with a *DialError (TLS): 502
// backend_tls_failed, a connect failure (the backend never read the
// request), and the error says why. With the certificate the same backend
// answers, and a backend that only asks for one (VerifyClientCertIfGiven)
// is served without.
func TestClientCertificateRefusalIsATLSFailure(t *testing.T) {
	ca := testpki.NewCA(t, "mesh CA")
	srvCert := ca.Issue(t, testpki.Leaf{CN: "backend.internal", DNS: []string{"backend.internal"}})
	clientCert := ca.Issue(t, testpki.Leaf{CN: "gateway", Client: true})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	strict := testbackend.NewMTLS(t, ok, srvCert, ca.Pool, "backend.internal")

	get := func(t *testing.T, url string, tc *tls.Config) (*http.Response, error) {
		rt, err := New(Options{Scheme: SchemeHTTPS, TLS: tc, ConnectTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	base := &tls.Config{RootCAs: ca.Pool, ServerName: "backend.internal"}
	for i := range 40 { // the timing of the refusal varies from one connection to the next
		start := time.Now()
		_, err := get(t, strict.URL, base)
		var de *DialError
		if !errors.As(err, &de) || !de.TLS || !IsConnectFailure(err) {
			t.Fatalf("try %d: %T %v, want a TLS *DialError", i, err, err)
		}
		if status, reason := Classify(context.Background(), err); status != 502 || reason != ReasonTLS {
			t.Fatalf("try %d: Classify %d %s, want 502 %s (%v)", i, status, reason, ReasonTLS, err)
		}
		if !strings.Contains(err.Error(), "refused the connection after asking for a client certificate") {
			t.Fatalf("try %d: %v does not say why", i, err)
		}
		if d := time.Since(start); d > refusalWait/2 {
			t.Fatalf("try %d: failed after %v, want at once", i, d)
		}
	}

	withCert := base.Clone()
	withCert.Certificates = []tls.Certificate{clientCert}
	if resp, err := get(t, strict.URL, withCert); err != nil || resp.StatusCode != 200 {
		t.Fatalf("with the client certificate: %v", err)
	}

	optional := httptest.NewUnstartedServer(ok)
	optional.EnableHTTP2 = true
	optional.TLS = &tls.Config{Certificates: []tls.Certificate{srvCert}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool}
	optional.StartTLS()
	defer optional.Close()
	for range 3 {
		if resp, err := get(t, optional.URL, base); err != nil || resp.StatusCode != 200 {
			t.Fatalf("a backend that only asks for a certificate, without one: %v", err)
		}
	}
}

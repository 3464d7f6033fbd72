package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// testHandshaker secures a connection with tls.Client and cfg, or fails.
type testHandshaker struct {
	cfg  *tls.Config
	fail error
}

func (h testHandshaker) Handshake(ctx context.Context, raw net.Conn) (*tls.Conn, error) {
	if h.fail != nil {
		raw.Close()
		return nil, h.fail
	}
	c := tls.Client(raw, h.cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return c, nil
}

// TestHandshaker: Options.Handshaker secures the connections of an
// HTTP/1.1 (SchemeHTTP) and an HTTP/2 (SchemeHTTPS) backend, whatever the
// request URL's scheme; a failed handshake is a TLS connect failure (502
// backend_tls_failed, never sent).
func TestHandshaker(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Proto)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	host := srv.Listener.Addr().String()
	for scheme, want := range map[string]struct{ alpn, proto string }{
		SchemeHTTP:  {"http/1.1", "HTTP/1.1"},
		SchemeHTTPS: {"h2", "HTTP/2.0"},
	} {
		rt, err := New(Options{Scheme: scheme, ConnectTimeout: 2 * time.Second,
			Handshaker: testHandshaker{cfg: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{want.alpn}}}})
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodGet, URLScheme(scheme)+"://"+host+"/", nil)
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("%s: %v", scheme, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != want.proto {
			t.Errorf("%s: the backend saw %q, want %q", scheme, body, want.proto)
		}
		rt.CloseIdleConnections()

		refused := errors.New("peer certificate refused")
		rt, _ = New(Options{Scheme: scheme, Handshaker: testHandshaker{fail: refused}})
		req, _ = http.NewRequest(http.MethodGet, URLScheme(scheme)+"://"+host+"/", nil)
		_, err = rt.RoundTrip(req)
		var de *DialError
		if !errors.As(err, &de) || !de.TLS || !errors.Is(err, refused) || !IsConnectFailure(err) {
			t.Errorf("%s: a failed handshake: %v, want a TLS *DialError wrapping it", scheme, err)
		}
		if status, reason := Classify(context.Background(), err); status != http.StatusBadGateway || reason != ReasonTLS {
			t.Errorf("%s: classified %d %s", scheme, status, reason)
		}
	}
	if _, err := New(Options{Scheme: SchemeH2C, Handshaker: testHandshaker{}}); err == nil {
		t.Error("h2c with a handshaker: no error")
	}
}

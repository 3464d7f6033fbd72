package gateway

import (
	"crypto/tls"
	"net"
	"net/http"
	"testing"

	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/certs"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/impulse-agent/impulse-agent/internal/testpki"
)

// TestResumedSessionsMeetTheCurrentClientCA: a session ticket issued before
// a reload still resumes, but a reload that replaces client_ca_file refuses
// a client whose certificate the new CA did not sign, resumption or not.
func TestResumedSessionsMeetTheCurrentClientCA(t *testing.T) {
	serverCA, oldCA, newCA := testpki.NewCA(t, "server CA"), testpki.NewCA(t, "old client CA"), testpki.NewCA(t, "new client CA")
	serverCert := serverCA.Issue(t, testpki.Leaf{CN: "gateway", DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	client := oldCA.Issue(t, testpki.Leaf{CN: "svc", Client: true})
	backend := testbackend.NewH1(t, named("ok"))
	lc := listenerFor(t, certs.Config{Default: serverCert, ClientAuth: certs.ClientAuthRequire, ClientCAs: oldCA.Pool}, false)
	gw, addr := startTLSGateway(t, lc, nil, backend)
	forEachProtocol(t, func(t *testing.T, proto string) {
		tc := &tls.Config{RootCAs: serverCA.Pool, ServerName: "localhost", Certificates: []tls.Certificate{client},
			ClientSessionCache: tls.NewLRUClientSessionCache(8)}
		get := func() (*http.Response, error) {
			// A new transport per request: a new connection, resuming
			// from the shared session cache.
			tr := clientTransport(proto, tc)
			defer func() {
				if c, ok := tr.(*http3.Transport); ok {
					c.Close()
				} else {
					tr.(*http.Transport).CloseIdleConnections()
				}
			}()
			resp, _, err := getWith(&http.Client{Transport: tr}, addr, nil)
			return resp, err
		}
		if resp, err := get(); err != nil || resp.StatusCode != 200 {
			t.Fatalf("first connection: %v", err)
		}
		resp, err := get()
		if err != nil || !resp.TLS.DidResume {
			t.Fatalf("second connection did not resume: %v", err)
		}
		// The same CA rebuilt (a reload): tickets still resume.
		same := listenerFor(t, certs.Config{Default: serverCert, ClientAuth: certs.ClientAuthRequire, ClientCAs: oldCA.Pool}, false)
		same.Name, same.Address = "tls", "127.0.0.1:0"
		if err := gw.Apply(t.Context(), Config{Upstreams: []UpstreamConfig{staticUpstream("u", "/", backend)}, Listeners: []ListenerConfig{same}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := get(); err != nil || !resp.TLS.DidResume {
			t.Fatalf("after a reload with the same CA: resumed %v, %v", err == nil && resp.TLS.DidResume, err)
		}
		// Another CA: the old client certificate no longer gets in.
		other := listenerFor(t, certs.Config{Default: serverCert, ClientAuth: certs.ClientAuthRequire, ClientCAs: newCA.Pool}, false)
		other.Name, other.Address = "tls", "127.0.0.1:0"
		if err := gw.Apply(t.Context(), Config{Upstreams: []UpstreamConfig{staticUpstream("u", "/", backend)}, Listeners: []ListenerConfig{other}}); err != nil {
			t.Fatal(err)
		}
		if resp, err := get(); err == nil {
			t.Fatalf("a client certificate of the replaced CA was admitted (resumed %v)", resp.TLS.DidResume)
		}
		// Back to the old CA for the next protocol.
		if err := gw.Apply(t.Context(), Config{Upstreams: []UpstreamConfig{staticUpstream("u", "/", backend)}, Listeners: []ListenerConfig{same}}); err != nil {
			t.Fatal(err)
		}
	})
}

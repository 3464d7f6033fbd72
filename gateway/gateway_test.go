package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// harness is a running gateway on a loopback port (UDP and TCP) with a
// client for one protocol that trusts its certificate.
type harness struct {
	t      *testing.T
	gw     *Gateway
	base   string
	client *http.Client
	proto  string // ProtocolH1, ProtocolH2 or ProtocolH3: what client speaks
	cert   *selfsigned.Cert
}

// newHarness is a gateway serving every protocol, with an HTTP/3 client.
func newHarness(t *testing.T, ups ...UpstreamConfig) *harness {
	t.Helper()
	return newHarnessOver(t, ProtocolH3, ups...)
}

// newHarnessOver is a gateway serving every protocol, with a client for
// proto.
func newHarnessOver(t *testing.T, proto string, ups ...UpstreamConfig) *harness {
	t.Helper()
	return startHarness(t, ListenerConfig{}, proto, ups...)
}

// startHarness starts a gateway with listener lc (Name, Address and TLS
// are filled in when empty) and a client for proto.
func startHarness(t *testing.T, lc ListenerConfig, proto string, ups ...UpstreamConfig) *harness {
	t.Helper()
	return startHarnessConfig(t, Config{Upstreams: ups}, lc, proto)
}

// startHarnessConfig is startHarness with the whole gateway Config (its
// Metrics, say).
func startHarnessConfig(t *testing.T, cfg Config, lc ListenerConfig, proto string) *harness {
	t.Helper()
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if lc.Name == "" {
		lc.Name = "test"
	}
	if lc.Address == "" {
		lc.Address = "127.0.0.1:0"
	}
	if lc.TLS == nil {
		lc.TLS = &tls.Config{Certificates: []tls.Certificate{cert.TLS}}
	}
	if err := gw.Start(context.Background(), []ListenerConfig{lc}); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, gw: gw, base: "https://" + gw.Addrs()[lc.Name].String(), proto: proto, cert: cert}
	h.client = &http.Client{Transport: clientTransport(proto, &tls.Config{RootCAs: cert.Pool, ServerName: "localhost"})}
	t.Cleanup(func() {
		h.client.CloseIdleConnections() // a test that left a body open must not stall the drain
		if c, ok := h.client.Transport.(io.Closer); ok {
			_ = c.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	return h
}

// clientTransport is a client transport that speaks only proto.
func clientTransport(proto string, tc *tls.Config) http.RoundTripper {
	switch proto {
	case ProtocolH3:
		return &http3.Transport{TLSClientConfig: tc}
	case ProtocolH2:
		tr := &http.Transport{TLSClientConfig: tc, Protocols: new(http.Protocols)}
		tr.Protocols.SetHTTP2(true)
		return tr
	default:
		tr := &http.Transport{TLSClientConfig: tc, Protocols: new(http.Protocols)}
		tr.Protocols.SetHTTP1(true)
		return tr
	}
}

// protocols are the ingress protocols every pipeline test runs over. A
// test that loops over protocols takes them from here: all of them, or
// one of the named subsets below.
var protocols = []string{ProtocolH1, ProtocolH2, ProtocolH3}

var (
	// tcpProtocols are the ingress protocols over TLS on TCP (Go's TLS
	// server and net/http's clients), where HTTP/3's QUIC has no say.
	tcpProtocols = []string{ProtocolH1, ProtocolH2}
	// streamProtocols are the ingress protocols with streams and
	// trailers, the ones gRPC runs over.
	streamProtocols = []string{ProtocolH2, ProtocolH3}
	// backendProtocols are the protocols of the test backends a test
	// runs each case against (backendOver): HTTP/1.1 and HTTP/2 over
	// TLS, named as the ingress ones.
	backendProtocols = []string{ProtocolH1, ProtocolH2}
)

// forEachProtocol runs f as a subtest per ingress protocol.
func forEachProtocol(t *testing.T, f func(t *testing.T, proto string)) {
	forProtocols(t, protocols, f)
}

// forProtocols runs f as a subtest per protocol of list (protocols or a
// subset), named after the protocol.
func forProtocols(t *testing.T, list []string, f func(t *testing.T, proto string)) {
	for _, p := range list {
		t.Run(p, func(t *testing.T) { f(t, p) })
	}
}

// except is list without the protocols drop, in list's order.
func except(list []string, drop ...string) []string {
	var out []string
	for _, p := range list {
		if !slices.Contains(drop, p) {
			out = append(out, p)
		}
	}
	return out
}

// backendOver is a test backend serving hf over proto, one of
// backendProtocols: HTTP/1.1 (cleartext) or HTTP/2 over TLS.
func backendOver(t *testing.T, proto string, hf http.HandlerFunc) *httptest.Server {
	if proto == ProtocolH1 {
		return testbackend.NewH1(t, hf)
	}
	return testbackend.NewH2(t, hf)
}

func (h *harness) get(path string) *http.Response {
	h.t.Helper()
	resp, err := h.client.Get(h.base + path)
	if err != nil {
		h.t.Fatalf("GET %s: %v", path, err)
	}
	return resp
}

// asyncResult is the outcome of a request made in the background.
type asyncResult struct {
	resp *http.Response
	body string
	err  error
}

// getAsync GETs path on a goroutine; the channel gets the response with
// its body read.
func (h *harness) getAsync(path string) <-chan asyncResult {
	done := make(chan asyncResult, 1)
	go func() {
		resp, err := h.client.Get(h.base + path)
		if err != nil {
			done <- asyncResult{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- asyncResult{resp, string(b), err}
	}()
	return done
}

// staticUpstream is an upstream with one route and static backends taken
// from test servers.
func staticUpstream(name, prefix string, servers ...*httptest.Server) UpstreamConfig {
	uc := UpstreamConfig{Config: upstream.Config{Name: name, ResponseHeaderTimeout: 5 * time.Second}, Routes: []RouteConfig{{PathPrefix: prefix}}}
	for i, s := range servers {
		uc.Static = append(uc.Static, specFor(strconv.Itoa(i), s))
		if s.TLS != nil {
			uc.TLS = &tls.Config{RootCAs: poolOf(s)}
		}
	}
	return uc
}

func specFor(id string, s *httptest.Server) upstream.Spec {
	host, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	scheme := "http"
	if s.TLS != nil {
		scheme = "https"
	}
	return upstream.Spec{ID: id, Scheme: scheme, Host: host, Port: p, Weight: 1}
}

func poolOf(s *httptest.Server) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.Certificate())
	return p
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReloadKeepsUpstreamWithEqualTLS: an Apply with an equal but newly
// built TLS configuration keeps the upstream (and its backends' health).
func TestReloadKeepsUpstreamWithEqualTLS(t *testing.T) {
	be := testbackend.NewH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	uc := staticUpstream("u", "/", be)
	g, err := New(Config{Upstreams: []UpstreamConfig{uc}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown(context.Background())
	before := g.table.Load().upstreams["u"]
	uc2 := staticUpstream("u", "/", be) // a fresh *tls.Config with the same roots
	if uc2.TLS == uc.TLS {
		t.Fatal("test needs distinct pointers")
	}
	if err := g.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{uc2}}); err != nil {
		t.Fatal(err)
	}
	if g.table.Load().upstreams["u"] != before {
		t.Fatal("equal TLS settings rebuilt the upstream")
	}
	uc3 := staticUpstream("u", "/", be)
	uc3.TLS.ServerName = "other.example"
	if err := g.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{uc3}}); err != nil {
		t.Fatal(err)
	}
	if g.table.Load().upstreams["u"] == before {
		t.Fatal("changed TLS settings kept the upstream")
	}
}

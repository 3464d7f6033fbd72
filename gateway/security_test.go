package gateway

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestSecurityNoOpenProxy backs SECURITY.md's "no open proxy" claim: no
// request target, Host, :authority or CONNECT makes the gateway connect to
// a host outside its configuration. A canary server stands for such a
// host; every trick names it, and it must see no request at all. Requests
// that match no route get 404 no_route; the others reach the configured
// backend, never the host they named.
func TestSecurityNoOpenProxy(t *testing.T) {
	var canaryHits atomic.Int64
	canary := testbackend.NewH1(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { canaryHits.Add(1) }))
	canaryHost := strings.TrimPrefix(canary.URL, "http://")
	var backendHits atomic.Int64
	be := testbackend.NewH1(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { backendHits.Add(1) }))
	app := staticUpstream("app", "/", be)
	app.Routes = []RouteConfig{{Host: "app.test", PathPrefix: "/"}}
	forEachProtocol(t, func(t *testing.T, proto string) {
		h := newHarnessOver(t, proto, app)
		addr := strings.TrimPrefix(h.base, "https://")
		tc := &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"}
		// authority is what the client names as the target host.
		authorities := []string{canaryHost, canaryHost + "."}
		if proto != ProtocolH3 {
			// quic-go's client hangs on a userinfo :authority it cannot
			// encode; its server resets such a stream (RFC 9114 §4.3.1).
			authorities = append(authorities, "app.test@"+canaryHost)
		}
		for _, authority := range authorities {
			for _, method := range []string{http.MethodGet, http.MethodConnect} {
				status := proxyAttempt(t, proto, addr, tc, method, authority)
				if status != 0 && status < 400 && method == http.MethodConnect {
					t.Errorf("%s %s: %d, want a refusal", method, authority, status)
				}
			}
		}
		if proto == ProtocolH1 {
			for _, raw := range []string{
				"GET http://" + canaryHost + "/ HTTP/1.1\r\nHost: " + canaryHost + "\r\n\r\n",
				"GET http://" + canaryHost + "/ HTTP/1.1\r\nHost: app.test\r\n\r\n",
				"GET http://app.test@" + canaryHost + "/ HTTP/1.1\r\nHost: app.test\r\n\r\n",
				"GET //" + canaryHost + "/ HTTP/1.1\r\nHost: app.test\r\n\r\n",
				"CONNECT " + canaryHost + " HTTP/1.1\r\nHost: app.test\r\n\r\n",
			} {
				_ = tlsH1(t, h, raw) // any answer but the canary's
			}
		}
		// The configured route still works, so the refusals above are not
		// a broken gateway.
		before := backendHits.Load()
		if status := proxyAttempt(t, proto, addr, tc, http.MethodGet, "app.test"); status != 200 {
			t.Errorf("app.test: %d", status)
		}
		if backendHits.Load() != before+1 {
			t.Errorf("the configured backend saw %d requests, want 1", backendHits.Load()-before)
		}
	})
	if n := canaryHits.Load(); n != 0 {
		t.Fatalf("a host outside the configuration got %d requests", n)
	}
}

// proxyAttempt sends one request for authority (the :authority or Host)
// to the gateway at addr over proto and returns the status (0 when the
// request was refused before a response).
func proxyAttempt(t *testing.T, proto, addr string, tc *tls.Config, method, authority string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := &http.Request{Method: method, URL: &url.URL{Scheme: "https", Host: addr, Path: "/"}, Host: authority, Header: http.Header{}}
	if method == http.MethodConnect {
		req.URL.Path = ""
	}
	req = req.WithContext(ctx)
	var rt http.RoundTripper
	switch proto {
	case ProtocolH3:
		tr := &http3.Transport{TLSClientConfig: tc}
		defer tr.Close()
		rt = tr
	case ProtocolH2:
		tr := &http2.Transport{TLSClientConfig: tc}
		defer tr.CloseIdleConnections()
		rt = tr
	default:
		tr := clientTransport(proto, tc).(*http.Transport)
		defer tr.CloseIdleConnections()
		rt = tr
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestSecurityTLSDefaults backs SECURITY.md's listener TLS defaults: TLS
// 1.2 is the minimum over TCP (1.0 and 1.1 fail the handshake), QUIC is
// TLS 1.3 only (RFC 9001 §4.2), and the TCP listener offers only AEAD
// cipher suites with forward secrecy to TLS 1.2 clients (Go's defaults: no
// CBC, RC4, 3DES or static RSA key exchange).
func TestSecurityTLSDefaults(t *testing.T) {
	h := newHarnessOver(t, ProtocolH1)
	addr := strings.TrimPrefix(h.base, "https://")
	dial := func(tc *tls.Config) (tls.ConnectionState, error) {
		tc.RootCAs, tc.ServerName = h.cert.Pool, "localhost"
		c, err := tls.Dial("tcp", addr, tc)
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer c.Close()
		return c.ConnectionState(), nil
	}
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		if _, err := dial(&tls.Config{MinVersion: v, MaxVersion: v}); err == nil {
			t.Errorf("a %s handshake succeeded", tls.VersionName(v))
		}
	}
	var weak []uint16
	for _, cs := range tls.InsecureCipherSuites() {
		weak = append(weak, cs.ID)
	}
	for _, cs := range tls.CipherSuites() {
		if !strings.Contains(cs.Name, "_GCM_") && !strings.Contains(cs.Name, "CHACHA20") || !strings.HasPrefix(cs.Name, "TLS_ECDHE_") {
			weak = append(weak, cs.ID)
		}
	}
	if st, err := dial(&tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: weak}); err == nil {
		t.Errorf("TLS 1.2 with a weak suite succeeded: %s", tls.CipherSuiteName(st.CipherSuite))
	}
	if st, err := dial(&tls.Config{MaxVersion: tls.VersionTLS12}); err != nil || st.Version != tls.VersionTLS12 {
		t.Errorf("TLS 1.2: %v %x", err, st.Version)
	}
	if st, err := dial(&tls.Config{}); err != nil || st.Version != tls.VersionTLS13 {
		t.Errorf("TLS 1.3 is not the default: %v %x", err, st.Version)
	}
	// QUIC: a TLS 1.2-only client cannot even try (quic-go refuses the
	// config), and what the listener negotiates is TLS 1.3.
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"}}
	defer tr.Close()
	resp, err := (&http.Client{Transport: tr}).Get(h.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 {
		t.Errorf("QUIC negotiated %+v", resp.TLS)
	}
}

// TestSecurityCRLFNeverReachesABackend backs SECURITY.md's claim that no
// CR, LF or NUL in a field name or value reaches a backend, whatever the
// ingress: HTTP/1.1 gets 400, HTTP/2 a stream error (RFC 9113 §8.2.1) and
// HTTP/3 H3_MESSAGE_ERROR (RFC 9114 §4.1.2), all from raw encoders that
// send what a client library would refuse to. The connection-specific
// fields are B11's tests (TestB11ConnectionSpecificFields*); the fuzz
// target FuzzOutgoingHeaders covers every other byte sequence.
func TestSecurityCRLFNeverReachesABackend(t *testing.T) {
	var rb recordingBackend
	up := rb.start(t)
	bad := []struct{ name, value string }{
		{"x-a", "v\r\nx-injected: 1"},
		{"x-a", "v\nx-injected: 1"},
		{"x-a", "v\rx"},
		{"x-a", "v\x00x"},
		{"x-a\r\nx-injected", "1"},
		{"x-a\x00", "1"},
	}
	t.Run(ProtocolH1, func(t *testing.T) {
		h := newHarnessOver(t, ProtocolH1, up)
		for _, f := range bad {
			if strings.ContainsAny(f.name, "\r\n") || strings.ContainsAny(f.value, "\n") {
				continue // a line break in HTTP/1.1 is the next line: the injected field is a field
			}
			resp := tlsH1(t, h, "GET / HTTP/1.1\r\nHost: localhost\r\n"+f.name+": "+f.value+"\r\n\r\n")
			if resp.StatusCode != 400 {
				t.Errorf("%q: %q: %d, want 400", f.name, f.value, resp.StatusCode)
			}
		}
	})
	t.Run(ProtocolH2, func(t *testing.T) {
		h := newHarnessOver(t, ProtocolH2, up)
		c := dialH2(t, h)
		for i, f := range bad {
			id := uint32(2*i + 1)
			c.request(id, "GET", "/", true, hpack.HeaderField{Name: f.name, Value: f.value})
			if res := c.await(id); res.status != "" && res.status != "400" {
				t.Errorf("%q: %q: status %s, want a stream error", f.name, f.value, res.status)
			} else if res.closed || res.goAway {
				c = dialH2(t, h)
			}
		}
	})
	t.Run(ProtocolH3, func(t *testing.T) {
		h := newHarness(t, up)
		conn := dialRaw(t, h)
		for _, f := range bad {
			wantMessageError(t, conn, headersFrame(
				qpack.HeaderField{Name: ":method", Value: "GET"}, qpack.HeaderField{Name: ":scheme", Value: "https"},
				qpack.HeaderField{Name: ":authority", Value: "localhost"}, qpack.HeaderField{Name: ":path", Value: "/"},
				qpack.HeaderField{Name: f.name, Value: f.value}))
		}
	})
	for _, r := range rb.take() {
		for name, vs := range r.header {
			for _, v := range vs {
				if strings.ContainsAny(name+v, "\r\n\x00") || strings.EqualFold(name, "x-injected") {
					t.Errorf("a backend got %q: %q", name, v)
				}
			}
		}
	}
}

// TestSecurityUnsendableRequestsNeverEject: requests the ingress lets
// through but the backend's transport refuses to encode (a declared
// trailer with an invalid name over HTTP/1.1, a :protocol on a plain GET
// over HTTP/2) are the client's fault: 400 invalid_request, never a 502
// counted against the backend, which saw nothing. Before, a client could
// get every backend ejected with a few such requests.
func TestSecurityUnsendableRequestsNeverEject(t *testing.T) {
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			var be *httptest.Server
			if scheme == "http" {
				be = testbackend.NewH1(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			} else {
				be = testbackend.NewH2(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			}
			uc := staticUpstream("u", "/", be)
			uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
			h := newHarnessOver(t, ProtocolH1, uc)
			for range 3 {
				resp := tlsH1(t, h, "POST /x HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nTrailer: X-Bad Name\r\n\r\n3\r\nabc\r\n0\r\nX-Bad Name: 1\r\n\r\n")
				if resp.StatusCode == http.StatusBadGateway {
					t.Errorf("a bad trailer name: %d %s", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
				}
			}
			c := dialH2(t, h)
			for i := range 3 {
				id := uint32(2*i + 1)
				c.request(id, "GET", "/", true, hpack.HeaderField{Name: ":protocol", Value: "websocket"})
				if res := c.await(id); res.status == "502" {
					t.Errorf(":protocol on a GET: 502")
				} else if res.closed || res.goAway {
					c = dialH2(t, h)
				}
			}
			for _, b := range h.gw.Backends() {
				if b.Ejected || !b.Eligible {
					t.Fatalf("the backend was ejected by the client's requests: %+v", b)
				}
			}
			if resp := h.get("/"); resp.StatusCode != 200 {
				t.Errorf("a good request after them: %d", resp.StatusCode)
			}
		})
	}
}

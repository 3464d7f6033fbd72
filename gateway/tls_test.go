package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/certs"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/impulse-agent/impulse-agent/internal/testpki"
)

// tlsProto is one ingress protocol for the TLS cases (I01, I02): how a
// client gets a response over a new connection, and how a handshake the
// server refused with a TLS alert shows.
type tlsProto struct {
	name string
	// get sends GET https://addr/ with tc (and hdr) on a new connection and
	// returns the response (body read into the string) or the error.
	get func(t *testing.T, addr string, tc *tls.Config, hdr http.Header) (*http.Response, string, error)
	// handshake connects with tc and returns how the server ended the
	// connection when it refused the client (nil if it did not).
	handshake func(t *testing.T, addr string, tc *tls.Config) error
	// refused reports whether err is the server closing the handshake
	// with TLS alert (RFC 8446 §6).
	refused func(err error, alert uint8) bool
}

// h3Proto is HTTP/3 with quic-go's client: a refused handshake is a
// CONNECTION_CLOSE with CRYPTO_ERROR 0x100+alert (RFC 9001 §4.8).
var h3Proto = tlsProto{
	name: "h3",
	get:  h3Get,
	handshake: func(t *testing.T, addr string, tc *tls.Config) error {
		_, _, err := h3Get(t, addr, tc, nil)
		return err
	},
	refused: func(err error, alert uint8) bool {
		var te *quic.TransportError
		return errors.As(err, &te) && te.Remote && te.ErrorCode == quic.TransportErrorCode(0x100+uint16(alert))
	},
}

func h3Get(t *testing.T, addr string, tc *tls.Config, hdr http.Header) (*http.Response, string, error) {
	tr := &http3.Transport{TLSClientConfig: tc}
	defer tr.Close()
	return getWith(&http.Client{Transport: tr, Timeout: 10 * time.Second}, addr, hdr)
}

// tcpProto is HTTP/1.1 or HTTP/2 over TLS with Go's client: a refused
// handshake is the server's alert, "remote error: tls: ..." (in TLS 1.3
// the client learns it on its first read, after sending its certificate).
func tcpProto(proto string) tlsProto {
	return tlsProto{
		name: proto,
		get: func(t *testing.T, addr string, tc *tls.Config, hdr http.Header) (*http.Response, string, error) {
			tr := clientTransport(proto, tc).(*http.Transport)
			defer tr.CloseIdleConnections()
			resp, body, err := getWith(&http.Client{Transport: tr, Timeout: 10 * time.Second}, addr, hdr)
			if err == nil && resp.ProtoMajor != map[string]int{ProtocolH1: 1, ProtocolH2: 2}[proto] {
				t.Fatalf("served over %s, want %s", resp.Proto, proto)
			}
			return resp, body, err
		},
		handshake: func(t *testing.T, addr string, tc *tls.Config) error {
			// A raw connection that only reads: a client that writes its
			// request at once may see its write fail (EPIPE, ECONNRESET)
			// before it reads the alert.
			tc = tc.Clone()
			tc.NextProtos = []string{map[string]string{ProtocolH1: "http/1.1", ProtocolH2: "h2"}[proto]}
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, tc)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Read(make([]byte, 1)); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, io.EOF) {
				return err
			}
			return nil
		},
		refused: func(err error, alert uint8) bool {
			var oe *net.OpError
			return errors.As(err, &oe) && oe.Op == "remote error" && oe.Err.Error() == tls.AlertError(alert).Error()
		},
	}
}

// tlsProtos are the protocols every TLS case runs over: a driver per
// entry of protocols.
var tlsProtos = func() []tlsProto {
	out := make([]tlsProto, 0, len(protocols))
	for _, p := range protocols {
		if p == ProtocolH3 {
			out = append(out, h3Proto)
			continue
		}
		out = append(out, tcpProto(p))
	}
	return out
}()

func getWith(c *http.Client, addr string, hdr http.Header) (*http.Response, string, error) {
	req, _ := http.NewRequest("GET", "https://"+addr+"/", nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// TLS alerts the cases expect (RFC 8446 §6.2).
const (
	alertCertificateExpired  = 45
	alertUnknownCA           = 48
	alertCertificateRequired = 116
)

// startTLSGateway runs a gateway with one listener "tls" built from lc
// (Name and Address filled in) routing every request to backend.
func startTLSGateway(t *testing.T, lc ListenerConfig, m *metrics.Metrics, backend *httptest.Server) (*Gateway, string) {
	t.Helper()
	gw, err := New(Config{Upstreams: []UpstreamConfig{staticUpstream("u", "/", backend)}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	lc.Name, lc.Address = "tls", "127.0.0.1:0"
	if err := gw.Start(context.Background(), []ListenerConfig{lc}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(ctx)
	})
	return gw, gw.Addrs()["tls"].String()
}

// listenerFor builds a ListenerConfig from a certs.Config as the agent does.
func listenerFor(t *testing.T, cfg certs.Config, forward bool) ListenerConfig {
	t.Helper()
	s, err := certs.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ListenerConfig{TLS: s.ServerConfig(tls.VersionTLS12), ForwardClientCert: forward, CertificateExpiry: s.Expiries()}
}

// xfccEcho answers with the X-Forwarded-Client-Cert fields it received,
// any spelling, one per line ("-" when none).
func xfccEcho(t *testing.T) *httptest.Server {
	return testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var got []string
		for k, vs := range r.Header {
			if strings.EqualFold(strings.ReplaceAll(k, "_", "-"), wire.XFCCField) {
				for _, v := range vs {
					got = append(got, k+": "+v)
				}
			}
		}
		if len(got) == 0 {
			got = []string{"-"}
		}
		io.WriteString(w, strings.Join(got, "\n"))
	}))
}

// TestI01ClientCertificates: with client_auth "require" only a certificate
// from the client CA, within its validity, gets a response; no
// certificate, another CA's and an expired one fail the handshake with
// their TLS alert (over QUIC: CRYPTO_ERROR). With "request" a client
// without a certificate is served and an invalid one still refused. The
// backend gets X-Forwarded-Client-Cert only for a verified certificate on
// a listener that forwards it, never the client's own copy. Every row runs
// over HTTP/3, HTTP/2 and HTTP/1.1 (quic-go's and Go's clients), and curl
// repeats the require rows over TCP.
func TestI01ClientCertificates(t *testing.T) {
	serverCA, clientCA, otherCA := testpki.NewCA(t, "server CA"), testpki.NewCA(t, "client CA"), testpki.NewCA(t, "other CA")
	serverCert := serverCA.Issue(t, testpki.Leaf{CN: "gateway", DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	valid := clientCA.Issue(t, testpki.Leaf{CN: "web-client", Client: true, URIs: []string{"spiffe://test/web"}, DNS: []string{"web.test"}})
	other := otherCA.Issue(t, testpki.Leaf{CN: "web-client", Client: true})
	expired := clientCA.Issue(t, testpki.Leaf{CN: "web-client", Client: true, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	sum := sha256.Sum256(valid.Certificate[0])
	wantXFCC := wire.XFCCField + ": Hash=" + hex.EncodeToString(sum[:]) + `;Subject="CN=web-client,O=impulse tests";URI=spiffe://test/web;DNS=web.test`
	spoofed := http.Header{wire.XFCCField: {"Hash=forged"}, "X-Forwarded_Client_Cert": {"Hash=forged"}}

	backend := xfccEcho(t)
	listen := func(mode certs.ClientAuth, forward bool) string {
		_, addr := startTLSGateway(t, listenerFor(t, certs.Config{Default: serverCert, ClientAuth: mode, ClientCAs: clientCA.Pool}, forward), nil, backend)
		return addr
	}
	addrs := map[string]string{
		"require":          listen(certs.ClientAuthRequire, true),
		"request":          listen(certs.ClientAuthRequest, true),
		"require, no xfcc": listen(certs.ClientAuthRequire, false),
		"none":             listen(certs.ClientAuthNone, true),
	}

	type row struct {
		listener string
		cert     *tls.Certificate
		alert    uint8  // the handshake fails with this alert; 0: served
		want     string // the backend's view of X-Forwarded-Client-Cert
	}
	rows := map[string]row{
		"require/none":            {"require", nil, alertCertificateRequired, ""},
		"require/other CA":        {"require", &other, alertUnknownCA, ""},
		"require/expired":         {"require", &expired, alertCertificateExpired, ""},
		"require/valid":           {"require", &valid, 0, wantXFCC},
		"request/none":            {"request", nil, 0, "-"},
		"request/other CA":        {"request", &other, alertUnknownCA, ""},
		"request/expired":         {"request", &expired, alertCertificateExpired, ""},
		"request/valid":           {"request", &valid, 0, wantXFCC},
		"not forwarded/valid":     {"require, no xfcc", &valid, 0, "-"},
		"client auth none/valid":  {"none", &valid, 0, "-"}, // never asked for, never verified
		"client auth none/no one": {"none", nil, 0, "-"},
	}
	for _, p := range tlsProtos {
		for name, rw := range rows {
			t.Run(p.name+"/"+name, func(t *testing.T) {
				tc := &tls.Config{RootCAs: serverCA.Pool, ServerName: "localhost"}
				if rw.cert != nil {
					// Sent even when the server's list of acceptable CAs
					// leaves it out (Go's client would then send none).
					tc.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return rw.cert, nil }
				}
				if rw.alert != 0 {
					err := p.handshake(t, addrs[rw.listener], tc)
					if err == nil {
						t.Fatalf("not refused; want the handshake refused with alert %d", rw.alert)
					}
					if !p.refused(err, rw.alert) {
						t.Fatalf("error %v (%T); want the handshake refused with alert %d", err, err, rw.alert)
					}
					return
				}
				resp, body, err := p.get(t, addrs[rw.listener], tc, spoofed)
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != 200 || body != rw.want {
					t.Fatalf("%d, backend saw\n%s\nwant\n%s", resp.StatusCode, body, rw.want)
				}
			})
		}
	}

	// curl (OpenSSL) over HTTP/2 and HTTP/1.1: refused without a
	// certificate, served with the valid one, whose identity the backend
	// gets. The refusal runs over TLS 1.2, where the server refuses before
	// its Finished and curl reports the alert (handshake_failure): over
	// TLS 1.3 curl writes its request at once and may see the closed
	// connection (ENOTCONN) before it reads the alert.
	t.Run("curl", func(t *testing.T) {
		curl := tool(t, "curl", "curl")
		dir := t.TempDir()
		caFile, certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key")
		certPEM, keyPEM := testpki.PEM(t, valid)
		for f, b := range map[string][]byte{caFile: serverCA.CAPEM(), certFile: certPEM, keyFile: keyPEM} {
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		url := "https://" + addrs["require"] + "/"
		for _, version := range []string{"--http2", "--http1.1"} {
			out, err := exec.Command(curl, "-sS", version, "--tls-max", "1.2", "--cacert", caFile, url).CombinedOutput()
			if err == nil || !strings.Contains(string(out), "alert handshake failure") {
				t.Errorf("curl %s without a certificate: %v\n%s", version, err, out)
			}
			got := run(t, curl, "-sS", version, "--cacert", caFile, "--cert", certFile, "--key", keyFile, "-H", "X-Forwarded-Client-Cert: Hash=forged", url)
			if got != wantXFCC {
				t.Errorf("curl %s with the valid certificate: backend saw\n%s\nwant\n%s", version, got, wantXFCC)
			}
		}
	})
}

// TestI02CertificatesBySNI: a listener with a default certificate and
// certificates for a.test and *.b.test serves a's for SNI a.test, the
// wildcard for x.b.test and the default for an unknown name or no SNI,
// never failing the handshake. impulse_tls_certificate_expiry_seconds
// reports each; after an Apply with rotated certificates an open
// connection keeps working and a new one gets the new certificate. Over
// HTTP/3, HTTP/2 and HTTP/1.1, and curl for the names over HTTP/2.
func TestI02CertificatesBySNI(t *testing.T) {
	ca := testpki.NewCA(t, "server CA")
	exp := time.Now().Add(10 * 24 * time.Hour).Truncate(time.Second)
	def := ca.Issue(t, testpki.Leaf{CN: "default", DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, NotAfter: exp})
	a := ca.Issue(t, testpki.Leaf{CN: "a", DNS: []string{"a.test"}, NotAfter: exp.Add(24 * time.Hour)})
	wild := ca.Issue(t, testpki.Leaf{CN: "wild", DNS: []string{"*.b.test"}, NotAfter: exp.Add(48 * time.Hour)})
	sink := metrics.NewInmemSink(time.Hour, time.Hour)
	mcfg := metrics.DefaultConfig("impulse")
	mcfg.EnableHostname, mcfg.EnableRuntimeMetrics = false, false
	m, _ := metrics.New(mcfg, sink)
	lc := listenerFor(t, certs.Config{Default: def, Certificates: []tls.Certificate{a, wild}}, false)
	backend := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	gw, addr := startTLSGateway(t, lc, m, backend)

	for _, p := range tlsProtos {
		for _, tc := range []struct{ sni, want string }{
			{"a.test", "a"},
			{"x.b.test", "wild"},
			{"unknown.test", "default"},
			{"", "default"}, // an IP literal: no SNI at all
		} {
			t.Run(p.name+"/"+tc.sni, func(t *testing.T) {
				cfg := &tls.Config{RootCAs: ca.Pool, ServerName: tc.sni}
				switch tc.sni {
				case "unknown.test":
					// The default does not cover the name: the client
					// would refuse it, the server still serves it.
					cfg = &tls.Config{InsecureSkipVerify: true, ServerName: tc.sni}
				case "":
					cfg.ServerName = "" // verified against 127.0.0.1
				}
				resp, body, err := p.get(t, addr, cfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got := resp.TLS.PeerCertificates[0].Subject.CommonName; got != tc.want || body != "ok" {
					t.Fatalf("served %q (%d %q), want %q", got, resp.StatusCode, body, tc.want)
				}
			})
		}
	}

	gauge := func(name string) float64 {
		for _, iv := range sink.Data() {
			iv.RLock()
			for _, g := range iv.PrecisionGauges {
				if g.Name == "impulse.tls.certificate.expiry_seconds" && len(g.Labels) == 2 &&
					g.Labels[0] == (metrics.Label{Name: "listener", Value: "tls"}) && g.Labels[1].Value == name {
					iv.RUnlock()
					return g.Value
				}
			}
			iv.RUnlock()
		}
		return -1e9
	}
	for name, notAfter := range map[string]time.Time{"default": exp, "a.test": a.Leaf.NotAfter, "*.b.test": wild.Leaf.NotAfter} {
		want := time.Until(notAfter).Seconds()
		if got := gauge(name); got > want+5 || got < want-5 {
			t.Errorf("expiry of %q = %v s, want about %v", name, got, want)
		}
	}

	// Rotation: a.test gets a new certificate. The connection opened
	// before the Apply keeps working; a new one sees the new certificate.
	t.Run("curl", func(t *testing.T) {
		curl := tool(t, "curl", "curl")
		caFile := filepath.Join(t.TempDir(), "ca.pem")
		if err := os.WriteFile(caFile, ca.CAPEM(), 0o600); err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		for name, want := range map[string]string{"a.test": "a", "x.b.test": "wild", "localhost": "default"} {
			out := run(t, curl, "-sSv", "--http2", "--cacert", caFile, "--resolve", name+":"+port+":127.0.0.1", "https://"+name+":"+port+"/")
			if !regexp.MustCompile(`(?m)^\*  subject: .*\bCN=`+want+`$`).MatchString(out) || !strings.HasSuffix(out, "ok") {
				t.Errorf("curl %s: want subject %s\n%s", name, want, out)
			}
		}
	})

	aTLS := &tls.Config{RootCAs: ca.Pool, ServerName: "a.test"}
	olds := map[string]*countingClient{}
	for _, p := range protocols {
		c := newCountingClient(p, aTLS)
		defer c.close()
		if resp, _, err := getWith(c.Client, addr, nil); err != nil || resp.TLS.PeerCertificates[0].Subject.CommonName != "a" {
			t.Fatalf("%s before the rotation: %v", p, err)
		}
		olds[p] = c
	}
	a2 := ca.Issue(t, testpki.Leaf{CN: "a rotated", DNS: []string{"a.test"}, NotAfter: exp.Add(72 * time.Hour)})
	lc2 := listenerFor(t, certs.Config{Default: def, Certificates: []tls.Certificate{a2, wild}}, false)
	lc2.Name, lc2.Address = "tls", "127.0.0.1:0"
	if err := gw.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{staticUpstream("u", "/", backend)}, Listeners: []ListenerConfig{lc2}}); err != nil {
		t.Fatal(err)
	}
	for p, c := range olds {
		resp, body, err := getWith(c.Client, addr, nil)
		if err != nil || body != "ok" || c.dials.Load() != 1 || resp.TLS.PeerCertificates[0].Subject.CommonName != "a" {
			t.Fatalf("%s: the connection opened before the rotation: %v %q after %d dials", p, err, body, c.dials.Load())
		}
	}
	for _, p := range tlsProtos {
		resp, _, err := p.get(t, addr, &tls.Config{RootCAs: ca.Pool, ServerName: "a.test"}, nil)
		if err != nil {
			t.Fatalf("%s: a new connection after the rotation: %v", p.name, err)
		}
		if got := resp.TLS.PeerCertificates[0].Subject.CommonName; got != "a rotated" {
			t.Fatalf("%s: a new connection after the rotation got %q", p.name, got)
		}
	}
	want := time.Until(a2.Leaf.NotAfter).Seconds()
	if got := gauge("a.test"); got > want+5 || got < want-5 {
		t.Errorf("expiry of a.test after the rotation = %v s, want about %v", got, want)
	}
}

// countingClient is a client for one protocol that counts the connections
// it opens, to tell a reused connection from a new one.
type countingClient struct {
	*http.Client
	dials atomic.Int32
	close func()
}

func newCountingClient(proto string, tc *tls.Config) *countingClient {
	c := &countingClient{}
	if proto == ProtocolH3 {
		tr := &http3.Transport{
			TLSClientConfig: tc,
			Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				c.dials.Add(1)
				return quic.DialAddrEarly(ctx, addr, tc, qc)
			},
		}
		c.Client, c.close = &http.Client{Transport: tr, Timeout: 10 * time.Second}, func() { tr.Close() }
		return c
	}
	tr := clientTransport(proto, tc).(*http.Transport)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	c.Client, c.close = &http.Client{Transport: tr, Timeout: 10 * time.Second}, tr.CloseIdleConnections
	return c
}

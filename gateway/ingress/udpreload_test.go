package ingress

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// syncBuffer is a log destination read while written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// udpListener starts an h3 listener with pp, answering h, logging to log;
// it returns the listener, its Config (for Reconfigure) and an HTTP/3
// client to it that gives a handshake up after handshake.
func udpListener(t testing.TB, pp *ProxyProtocol, h http.Handler, log *syncBuffer, handshake time.Duration) (*Listener, Config, *http.Client) {
	t.Helper()
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: "test", Address: "127.0.0.1:0", Protocols: []string{ProtocolH3},
		TLS: &tls.Config{Certificates: []tls.Certificate{cert.TLS}}, ProxyProtocol: pp}
	drains := new(Drains)
	l, err := Start(cfg, Deps{Pipeline: handlerPipeline{h}, Metrics: observe.NewMetrics(nil), Drains: drains,
		Log: hclog.New(&hclog.LoggerOptions{Output: log, Level: hclog.Warn})})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Address = l.Addr().String()
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool, ServerName: "localhost"},
		QUICConfig: &quic.Config{HandshakeIdleTimeout: handshake}}
	t.Cleanup(func() {
		tr.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Shutdown(ctx)
		drains.Wait(ctx)
	})
	return l, cfg, &http.Client{Transport: tr}
}

// fetch GETs path from l on c: status and body, or the error.
func fetch(c *http.Client, l *Listener, path string) (int, string, error) {
	resp, err := c.Get("https://" + l.Addr().String() + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// remoteEcho answers with the request's RemoteAddr host.
var remoteEcho = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.WriteString(w, clientaddr.Of(r).String())
})

// TestUDPHeaderReload: a reload applies the proxied socket's trusted and
// mode to the next datagram, and a socket bound with udp passes datagrams
// through once it is turned off; setting udp for a socket bound without it
// changes nothing there and says so in a warning.
func TestUDPHeaderReload(t *testing.T) {
	trusted, _ := clientaddr.ParsePrefixes([]string{"127.0.0.0/8"})
	elsewhere, _ := clientaddr.ParsePrefixes([]string{"10.0.0.0/8"})
	log := &syncBuffer{}
	l, cfg, _ := udpListener(t, &ProxyProtocol{Trusted: elsewhere, UDP: UDPSPP}, remoteEcho, log, time.Second)
	if l.quic.proxied == nil {
		t.Fatal("the socket was not wrapped")
	}
	client := func() *http.Client {
		tr := &http3.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, QUICConfig: &quic.Config{HandshakeIdleTimeout: time.Second}}
		t.Cleanup(func() { tr.Close() })
		return &http.Client{Transport: tr}
	}
	if status, body, err := fetch(client(), l, "/"); err != nil || status != 200 || body != "127.0.0.1" {
		t.Fatalf("direct, untrusted: %d %q %v", status, body, err)
	}
	cfg.ProxyProtocol = &ProxyProtocol{Trusted: trusted, UDP: UDPProxyV2} // now trusted, required
	if err := l.Reconfigure(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fetch(client(), l, "/"); err == nil {
		t.Error("a trusted peer without a header was served in required mode after the reload")
	}
	if n := l.deps.Metrics.ProxyProtocolRefusals("test", observe.ProxyUDP, observe.ProxyMissing); n == 0 {
		t.Error("no missing refusal counted")
	}
	cfg.ProxyProtocol = nil
	if err := l.Reconfigure(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if status, body, err := fetch(client(), l, "/"); err != nil || status != 200 || body != "127.0.0.1" {
		t.Errorf("udp off on a wrapped socket: %d %q %v", status, body, err)
	}
	if log.String() != "" {
		t.Errorf("warned: %s", log)
	}

	log2 := &syncBuffer{}
	l2, cfg2, _ := udpListener(t, nil, remoteEcho, log2, time.Second)
	cfg2.ProxyProtocol = &ProxyProtocol{Trusted: trusted, UDP: UDPSPP}
	if err := l2.Reconfigure(context.Background(), cfg2); err != nil {
		t.Fatal(err)
	}
	if l2.quic.proxied != nil || !strings.Contains(log2.String(), "proxy_protocol udp applies to a UDP socket bound from now on") {
		t.Errorf("wrapped %v; log %q", l2.quic.proxied != nil, log2)
	}
	if status, body, err := fetch(client(), l2, "/"); err != nil || status != 200 || body != "127.0.0.1" {
		t.Errorf("a socket bound without udp: %d %q %v", status, body, err)
	}
}

// BenchmarkQUICDownload is what proxy_protocol.udp costs quic-go on the
// socket itself (README "Client address"): a 16 MiB response over HTTP/3
// on loopback from a plain listener (GSO, recvmmsg, ECN) and from one whose
// socket is wrapped (udp "v2", mode optional: the client, without a
// header, is served as itself through the wrapper's one-datagram calls).
func BenchmarkQUICDownload(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 16<<20)
	big := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })
	trusted, _ := clientaddr.ParsePrefixes([]string{"127.0.0.0/8"})
	for _, bc := range []struct {
		name string
		pp   *ProxyProtocol
	}{
		{"socket", nil},
		{"wrapped", &ProxyProtocol{Trusted: trusted, Optional: true, UDP: UDPProxyV2}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			l, _, c := udpListener(b, bc.pp, big, &syncBuffer{}, 10*time.Second)
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				resp, err := c.Get("https://" + l.Addr().String() + "/")
				if err != nil {
					b.Fatal(err)
				}
				if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != int64(len(body)) {
					b.Fatal(n, err)
				}
				resp.Body.Close()
			}
		})
	}
}

// TestUDPHeaderCheck: a listener with an unknown UDP header format is not
// started (the agent's HCL check refuses it first, at its line).
func TestUDPHeaderCheck(t *testing.T) {
	lc := Config{Name: "test", TLS: &tls.Config{}, ProxyProtocol: &ProxyProtocol{UDP: "bogus"}}
	if err := lc.Check(); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("Check: %v", err)
	}
	for _, f := range []UDPHeader{UDPNone, UDPSPP, UDPProxyV2} {
		lc.ProxyProtocol.UDP = f
		if err := lc.Check(); err != nil {
			t.Errorf("%q: %v", f, err)
		}
	}
}

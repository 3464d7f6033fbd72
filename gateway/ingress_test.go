package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// requestsCountedOver is the request count of one label set for one
// protocol.
func requestsCountedOver(g *Gateway, proto, upstream, code, reason string) uint64 {
	want := observe.RequestLabels{Listener: "test", Protocol: proto, Upstream: upstream, Code: code, Reason: reason}
	return g.obs.Metrics.Requests(func(l observe.RequestLabels) bool { return l == want })
}

// TestPipelineOverEveryProtocol: routing, balancing and the gateway's own
// answers are the same over HTTP/1.1, HTTP/2 and HTTP/3, and the request
// metrics carry the protocol.
func TestPipelineOverEveryProtocol(t *testing.T) {
	a := testbackend.NewH1(t, named("a"))
	b := testbackend.NewH2(t, named("b"))
	rr1, rr2 := testbackend.NewH1(t, named("rr1")), testbackend.NewH1(t, named("rr2"))
	closed := testbackend.NewH1(t, named("x"))
	closed.Close()
	slow := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	timeout := staticUpstream("slow", "/slow", slow)
	timeout.ResponseHeaderTimeout = 100 * time.Millisecond
	ups := []UpstreamConfig{
		staticUpstream("a", "/a", a), staticUpstream("b", "/b", b), staticUpstream("rr", "/rr", rr1, rr2),
		staticUpstream("refused", "/refused", closed), timeout,
		{Config: upstream.Config{Name: "empty"}, Routes: []RouteConfig{{PathPrefix: "/empty"}}},
	}
	forEachProtocol(t, func(t *testing.T, proto string) {
		h := newHarnessOver(t, proto, ups...)
		for _, c := range []struct {
			path, body string
			status     int
			reason     string
		}{
			{"/a", "a", 200, ""},
			{"/b", "b", 200, ""},
			{"/nowhere", "", 404, "no_route"},
			{"/empty", "", 503, "no_healthy_backend"},
			{"/refused", "", 502, "backend_connect_failed"},
			{"/slow", "", 504, "response_header_timeout"},
		} {
			resp := h.get(c.path)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != int(proto[1]-'0') {
				t.Fatalf("%s answered over %s", c.path, resp.Proto)
			}
			if resp.StatusCode != c.status || resp.Header.Get("X-Impulse-Error") != c.reason || (c.body != "" && string(body) != c.body) {
				t.Errorf("%s: %d %q %q, want %d %q %q", c.path, resp.StatusCode, resp.Header.Get("X-Impulse-Error"), body, c.status, c.reason, c.body)
			}
		}
		seen := map[string]int{}
		for range 4 {
			resp := h.get("/rr")
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			seen[string(body)]++
		}
		if seen["rr1"] != 2 || seen["rr2"] != 2 {
			t.Errorf("round robin over %s: %v", proto, seen)
		}
		for _, c := range []struct {
			up, code, reason string
			n                uint64
		}{{"a", "2xx", "", 1}, {"rr", "2xx", "", 4}, {"", "4xx", "no_route", 1}, {"empty", "5xx", "no_healthy_backend", 1}, {"slow", "5xx", "response_header_timeout", 1}} {
			if n := requestsCountedOver(h.gw, proto, c.up, c.code, c.reason); n != c.n {
				t.Errorf("requests{protocol=%s,upstream=%q,code=%s,reason=%q} = %d, want %d", proto, c.up, c.code, c.reason, n, c.n)
			}
		}
	})
}

// TestI07AltSvc: responses over TCP carry the gateway's Alt-Svc, never the
// backend's; HTTP/3 responses carry none; no h3 entry without h3.
func TestI07AltSvc(t *testing.T) {
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Alt-Svc", `h2=":9999"; ma=60`)
	}))
	up := staticUpstream("u", "/u", be)
	for _, c := range []struct {
		name  string
		lc    ListenerConfig
		proto string
		want  string // "PORT" is the listener's port
	}{
		{"h1 default", ListenerConfig{}, ProtocolH1, `h3=":PORT"; ma=86400`},
		{"h2 default", ListenerConfig{}, ProtocolH2, `h3=":PORT"; ma=86400`},
		{"h3", ListenerConfig{}, ProtocolH3, ""},
		{"advertised port", ListenerConfig{AltSvcPort: 443, AltSvcMaxAge: time.Hour}, ProtocolH2, `h3=":443"; ma=3600`},
		{"no h3", ListenerConfig{Protocols: []string{ProtocolH1, ProtocolH2}}, ProtocolH1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := startHarness(t, c.lc, c.proto, up)
			_, port, _ := net.SplitHostPort(h.gw.Addrs()["test"].String())
			want := strings.ReplaceAll(c.want, "PORT", port)
			for _, path := range []string{"/u", "/missing"} { // proxied, and the gateway's own answer
				resp := h.get(path)
				resp.Body.Close()
				if got := resp.Header.Values("Alt-Svc"); strings.Join(got, ",") != want {
					t.Errorf("%s over %s: Alt-Svc %q, want %q", path, resp.Proto, got, want)
				}
			}
		})
	}
}

// TestTCPIngressRefusesWhatItCannotServe: plain HTTP on the TLS port gets a
// 400 (as Go's server answers), an ALPN the listener does not offer fails
// the handshake with no_application_protocol (RFC 7301 §3.2).
func TestTCPIngressRefusesWhatItCannotServe(t *testing.T) {
	h := startHarness(t, ListenerConfig{Protocols: []string{ProtocolH2, ProtocolH3}}, ProtocolH2, staticUpstream("u", "/", testbackend.NewH1(t, named("u"))))
	addr := h.gw.Addrs()["test"].String()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.0 400") {
		t.Errorf("plain HTTP to the TLS port: %q %v", line, err)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"spdy/3"}})
	if err == nil {
		conn.Close()
		t.Error("ALPN spdy/3: handshake succeeded")
	} else if !strings.Contains(err.Error(), "no application protocol") {
		t.Errorf("ALPN spdy/3: %v, want the no_application_protocol alert", err)
	}
	// Without ALPN, or with only http/1.1, a client would speak HTTP/1.1,
	// which this listener does not.
	for _, alpn := range [][]string{nil, {"http/1.1"}} {
		if conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: alpn}); err == nil {
			conn.Close()
			t.Errorf("ALPN %q: admitted to an h2-only listener", alpn)
		}
	}
	// The h2 client still works.
	resp := h.get("/")
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Errorf("h2: %d %s", resp.StatusCode, resp.Proto)
	}
}

// TestProtocolSubsets: a listener binds only the sockets its protocols
// need.
func TestProtocolSubsets(t *testing.T) {
	up := staticUpstream("u", "/", testbackend.NewH1(t, named("u")))
	t.Run("h1 only", func(t *testing.T) {
		h := startHarness(t, ListenerConfig{Protocols: []string{ProtocolH1}}, ProtocolH1, up)
		resp := h.get("/")
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != 1 {
			t.Errorf("h1: %d %s", resp.StatusCode, resp.Proto)
		}
		// The UDP port is free: nothing serves HTTP/3.
		pc, err := net.ListenPacket("udp", h.gw.Addrs()["test"].String())
		if err != nil {
			t.Errorf("the UDP port of an h1-only listener is taken: %v", err)
		} else {
			pc.Close()
		}
	})
	t.Run("h3 only", func(t *testing.T) {
		h := startHarness(t, ListenerConfig{Protocols: []string{ProtocolH3}}, ProtocolH3, up)
		resp := h.get("/")
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("h3: %d", resp.StatusCode)
		}
		if c, err := net.Dial("tcp", h.gw.Addrs()["test"].String()); err == nil {
			c.Close()
			t.Error("an h3-only listener accepts TCP")
		}
	})
}

// TestReloadChangesProtocols: turning TCP on and off on a running listener
// keeps its address and its open QUIC connections.
func TestReloadChangesProtocols(t *testing.T) {
	up := staticUpstream("u", "/", testbackend.NewH1(t, named("u")))
	// The TCP port of the UDP one's number must stay free until the reload
	// binds it: an outgoing connection could take it (Apply then fails with
	// EADDRINUSE, as it should). A listener holds it meanwhile.
	var h *harness
	var hold net.Listener
	for range 5 {
		h = startHarness(t, ListenerConfig{Protocols: []string{ProtocolH3}}, ProtocolH3, up)
		var err error
		if hold, err = net.Listen("tcp", h.gw.Addrs()["test"].String()); err == nil {
			break
		}
	}
	if hold == nil {
		t.Fatal("no port free for both UDP and TCP")
	}
	lc := ListenerConfig{Name: "test", Address: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{h.cert.TLS}}}
	get := func(c *http.Client) int {
		resp, err := c.Get(h.base + "/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	get(h.client)
	l := h.gw.listeners["test"]
	h2 := &http.Client{Transport: clientTransport(ProtocolH2, &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"})}
	defer h2.CloseIdleConnections()
	hold.Close() // just before the reload binds it
	if err := h.gw.Apply(t.Context(), Config{Upstreams: []UpstreamConfig{up}, Listeners: []ListenerConfig{lc}}); err != nil {
		t.Fatal(err)
	}
	if h.gw.listeners["test"] != l || get(h2) != 200 || get(h.client) != 200 || l.QUICConns() != 1 {
		t.Fatalf("after turning TCP on: same listener %v, QUIC connections %d", h.gw.listeners["test"] == l, l.QUICConns())
	}
	lc.Protocols = []string{ProtocolH3}
	if err := h.gw.Apply(t.Context(), Config{Upstreams: []UpstreamConfig{up}, Listeners: []ListenerConfig{lc}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool {
		c, err := net.Dial("tcp", h.gw.Addrs()["test"].String())
		if err == nil {
			c.Close()
		}
		return err != nil
	}, "the TCP socket to close")
	if get(h.client) != 200 || l.QUICConns() != 1 {
		t.Fatalf("the QUIC connection did not survive: %d", l.QUICConns())
	}
}

// TestDrainOverEveryProtocol: a drain lets an in-flight request finish
// over every protocol; HTTP/1.1 answers it with "Connection: close",
// HTTP/2 and HTTP/3 with GOAWAY; no new request gets in.
func TestDrainOverEveryProtocol(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		started, release := make(chan struct{}), make(chan struct{})
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-release
			io.WriteString(w, "done")
		}))
		h := newHarnessOver(t, proto, staticUpstream("u", "/", be))
		done := h.getAsync("/")
		<-started
		addr := h.gw.Addrs()["test"].String()
		shut := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			shut <- h.gw.Shutdown(ctx)
		}()
		eventually(t, 5*time.Second, func() bool {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			return err != nil
		}, "the listener to stop accepting")
		close(release)
		r := <-done
		if r.err != nil || r.resp.StatusCode != 200 || r.body != "done" {
			t.Fatalf("in-flight request over %s: %+v", proto, r)
		}
		if proto == ProtocolH1 && !r.resp.Close {
			t.Errorf("HTTP/1.1 response during drain lacks Connection: close: %v", r.resp.Header)
		}
		if err := <-shut; err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
}

// TestB16ExpectContinueOverTCP: over HTTP/1.1 and HTTP/2 a client waiting
// for 100 (Continue) gets it (Go's servers send it when the transport first
// reads the body), then the final status.
func TestB16ExpectContinueOverTCP(t *testing.T) {
	echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		w.Write(b)
	})
	for _, ingress := range tcpProtocols {
		for _, name := range backendProtocols {
			be := backendOver(t, name, echo)
			t.Run(ingress+" to "+name, func(t *testing.T) {
				h := newHarnessOver(t, ingress, staticUpstream("u", "/", be))
				h.client.Transport.(*http.Transport).ExpectContinueTimeout = time.Minute // the client's patience
				var got100 atomic.Bool
				ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{Got100Continue: func() { got100.Store(true) }})
				req, _ := http.NewRequestWithContext(ctx, "POST", h.base+"/upload", strings.NewReader("hello"))
				req.Header.Set("Expect", "100-continue")
				resp, err := h.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if !got100.Load() || resp.StatusCode != 201 || string(body) != "hello" {
					t.Errorf("100 seen %v, final %d %q", got100.Load(), resp.StatusCode, body)
				}
			})
		}
	}
}

// TestReloadTurningH1OrH2OffClosesTheirConnections: a reload that keeps TCP
// but drops h1 or h2 ends the open connections of the dropped protocol
// after their next response (HTTP/2 GOAWAY, HTTP/1.1 Connection: close),
// and new ones cannot negotiate it.
func TestReloadTurningH1OrH2OffClosesTheirConnections(t *testing.T) {
	up := staticUpstream("u", "/", testbackend.NewH1(t, named("u")))
	for _, c := range []struct{ drop, keep string }{{ProtocolH2, ProtocolH1}, {ProtocolH1, ProtocolH2}} {
		t.Run("drop "+c.drop, func(t *testing.T) {
			h := newHarnessOver(t, c.drop, up)
			resp := h.get("/")
			io.Copy(io.Discard, resp.Body) // an HTTP/1.1 connection is reused only after its body was read
			resp.Body.Close()
			lc := ListenerConfig{Name: "test", Address: "127.0.0.1:0", TLS: &tls.Config{Certificates: []tls.Certificate{h.cert.TLS}}, Protocols: []string{c.keep, ProtocolH3}}
			if err := h.gw.Apply(t.Context(), Config{Upstreams: []UpstreamConfig{up}, Listeners: []ListenerConfig{lc}}); err != nil {
				t.Fatal(err)
			}
			// The open connection serves one more request, its last.
			resp = h.get("/")
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || (c.drop == ProtocolH1 && !resp.Close) {
				t.Fatalf("last request on the %s connection: %d, close %v", c.drop, resp.StatusCode, resp.Close)
			}
			eventually(t, 5*time.Second, func() bool {
				resp, err := h.client.Get(h.base + "/")
				if err == nil {
					resp.Body.Close()
				}
				return err != nil
			}, "the dropped protocol to be refused")
		})
	}
}

// TestH3RequestOutlivesIdleTimeout: idle_timeout closes an HTTP/3
// connection without a request in flight, never one whose request waits on
// a slow backend (keep-alive PINGs hold the QUIC connection meanwhile).
func TestH3RequestOutlivesIdleTimeout(t *testing.T) {
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(1500 * time.Millisecond) // three idle timeouts of silence
		}
		io.WriteString(w, "done")
	}))
	h := startHarness(t, ListenerConfig{Limits: Limits{IdleTimeout: 500 * time.Millisecond}}, ProtocolH3, staticUpstream("u", "/", be))
	r := <-h.getAsync("/slow")
	if r.err != nil || r.body != "done" {
		t.Fatalf("a request slower than idle_timeout: %v %q", r.err, r.body)
	}
	l := h.gw.listeners["test"]
	eventually(t, 5*time.Second, func() bool { return l.QUICConns() == 0 }, "the idle connection to close")
}

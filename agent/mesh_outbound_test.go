package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

// Outbound service mesh (issue 23 item 4, case M04): upstreams with
// consul { connect = true } dial /v1/health/connect/<service> instances
// with the gateway's leaf, verifying the server's SPIFFE ID.

// outboundConfig is a gateway with identity service, Consul at consulAddr,
// and an upstream "up" for the Connect service target on its TLS listener
// "main".
func outboundConfig(service, consulAddr, target string) string {
	return baseConfig + fmt.Sprintf(`
connect {
  service = %q
}
consul {
  address = %q
  wait    = "2s"
}
upstream "up" {
  route {}
  consul {
    service = %q
    connect = true
  }
}
`, service, consulAddr, target)
}

// outboundGet is one GET through r's listener main, bounded to 5 s: a
// refused mesh dial must answer, never hang.
func outboundGet(r *running, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+r.a.ListenerAddrs()["main"].String()+path, nil)
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// impostor is a TLS server presenting a valid leaf of another service,
// counting the requests it would serve.
func impostor(t *testing.T, consul *consultest.Agent, service string) (addr string, requests *atomic.Int64) {
	t.Helper()
	consul.RegisterTTL(t, service+"-1", service, "127.0.0.1", 9, nil, nil)
	leaf, _, err := consul.Client().Agent().ConnectCALeaf(service, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair([]byte(leaf.CertPEM), []byte(leaf.PrivateKeyPEM))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAnyClientCert, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	requests = new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		io.WriteString(w, "impostor")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), requests
}

// TestMeshOutboundToGateway: gateway A (identity client) reaches gateway
// B's mesh listener (identity web, registered Connect-native) through an
// upstream { consul { service = "web", connect = true } }: B sees A as
// client (its intentions and X-Forwarded-Client-Cert), A verified B as
// web; over HTTP/1.1 by default, HTTP/2 with protocol = "http2"; a reload
// keeps it working. An intention deny client → web turns A's answers into B's 403s on
// a pooled connection (502 on a new one: the handshake is refused), never
// hangs; an allow lets it back. An impostor
// instance of web presenting a valid leaf of service other is never sent
// a request: A refuses it at the handshake (502 backend_tls_failed).
func TestMeshOutboundToGateway(t *testing.T) {
	e := startMesh(t)
	_, meshPort, _ := net.SplitHostPort(e.r.a.ListenerAddrs()["mesh"].String())
	port, _ := strconv.Atoi(meshPort)
	e.consul.Register(t, api.AgentServiceRegistration{ID: "web-1", Name: "web", Address: "127.0.0.1", Port: port,
		Connect: &api.AgentServiceConnect{Native: true}})

	a := start(t, outboundConfig("client", e.consul.Addr(), "web"))
	var code int
	var body string
	var err error
	defer func() {
		if t.Failed() {
			t.Logf("last answer: %d %q %v\ngateway A:\n%s", code, body, err, a.logs)
		}
	}()
	waitUntil(t, "A reaches B over the mesh", 30*time.Second, func() bool {
		code, body, err = outboundGet(a, "/hello")
		return code == 200 && body == "app"
	})
	if code, body, err = outboundGet(a, "/xfcc"); code != 200 || !contains(body, "URI="+e.svc("client")) {
		t.Errorf("B's app saw X-Forwarded-Client-Cert %q (%d, %v), want A's identity %s", body, code, err, e.svc("client"))
	}
	if m := e.metricsText(t); !contains(m, `impulse_connect_authorizations{result="allow",source="client"}`) {
		t.Error("B did not authorize A as client")
	}
	if m := e.metricsText(t); !contains(m, `listener="mesh",protocol="h1",reason="",upstream="app"}`) {
		t.Error("A did not reach B over HTTP/1.1 (protocol http)")
	}
	// A reload that changes nothing keeps the upstream working.
	if code, body := a.control("POST", "/v1/reload", ""); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if code, body, err = outboundGet(a, "/hello"); code != 200 || body != "app" {
		t.Fatalf("after a reload: %d %q %v", code, body, err)
	}

	// protocol = "http2": HTTP/2 inside the mTLS connection (ALPN h2).
	cfg2 := strings.Replace(outboundConfig("client", e.consul.Addr(), "web"), "connect = true", "connect = true\n    protocol = \"http2\"", 1)
	a2 := start(t, cfg2)
	waitUntil(t, "A2 reaches B over HTTP/2", 30*time.Second, func() bool {
		code, body, err = outboundGet(a2, "/hello")
		return code == 200 && body == "app"
	})
	if m := e.metricsText(t); !contains(m, `listener="mesh",protocol="h2",reason="",upstream="app"}`) {
		t.Error("A2 did not reach B over HTTP/2 (protocol http2)")
	}

	e.setIntentions(t, &api.SourceIntention{Name: "client", Action: api.IntentionActionDeny})
	// B decides every request too: over A's pooled connection the answer
	// is B's 403 intention_denied; a new connection would be refused at
	// B's handshake, which A answers 502.
	waitUntil(t, "the deny client → web is answered", 10*time.Second, func() bool {
		code, body, err = outboundGet(a, "/hello")
		return err == nil && (code == http.StatusBadGateway || code == http.StatusForbidden && contains(body, "intention_denied"))
	})

	e.setIntentions(t, &api.SourceIntention{Name: "client", Action: api.IntentionActionAllow})
	waitUntil(t, "the allow lets A back", 10*time.Second, func() bool {
		code, body, err = outboundGet(a, "/hello")
		return code == 200 && body == "app"
	})

	// The impostor as web's only instance: refused at the handshake.
	addr, requests := impostor(t, e.consul, "other")
	host, p, _ := net.SplitHostPort(addr)
	ip, _ := strconv.Atoi(p)
	e.consul.Register(t, api.AgentServiceRegistration{ID: "web-impostor", Name: "web", Address: host, Port: ip,
		Connect: &api.AgentServiceConnect{Native: true}})
	e.consul.Deregister(t, "web-1")
	waitUntil(t, "only the impostor is left: 502", 10*time.Second, func() bool {
		code, body, err = outboundGet(a, "/hello")
		return err == nil && code == http.StatusBadGateway
	})
	for range 5 {
		if code, body, err = outboundGet(a, "/hello"); err != nil || code != http.StatusBadGateway {
			t.Fatalf("through the impostor: %d %q %v, want 502", code, body, err)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Fatalf("the impostor served %d requests", n)
	}
	e.consul.Register(t, api.AgentServiceRegistration{ID: "web-1", Name: "web", Address: "127.0.0.1", Port: port,
		Connect: &api.AgentServiceConnect{Native: true}})
	waitUntil(t, "the real web is back", 10*time.Second, func() bool {
		code, body, err = outboundGet(a, "/hello")
		return code == 200 && body == "app"
	})
	if n := requests.Load(); n != 0 {
		t.Fatalf("the impostor served %d requests", n)
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// TestM04MeshOutboundBuiltinProxy: an app behind Consul's own built-in
// proxy (`consul connect proxy -sidecar-for db-1`, a Connect peer we did
// not write) is reached through upstream { consul { service = "db",
// connect = true } }: the instance is the sidecar (its address and port,
// from /v1/health/connect/db), dialled with the gateway's leaf for web,
// which the proxy verifies and authorizes. An impostor instance of db (a
// valid leaf of service other) is refused at every handshake, its
// requests retried on the real db, and ejected; never sent a request. An
// intention deny web → db at
// the proxy turns the answers into 502s (it refuses new connections; the
// upstream's idle timeout of 200ms closes the pooled ones), never hangs,
// and an allow lets them through again.
func TestM04MeshOutboundBuiltinProxy(t *testing.T) {
	bin := os.Getenv("CONSUL_BIN")
	if bin == "" {
		t.Fatal("CONSUL_BIN is not set (bash scripts/consul.sh prints it)")
	}
	consul := consultest.Start(t)
	app := backend(t, "db")
	_, appPort, _ := net.SplitHostPort(app.Listener.Addr().String())
	ap, _ := strconv.Atoi(appPort)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sidecarPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	consul.Register(t, api.AgentServiceRegistration{ID: "db-1", Name: "db", Address: "127.0.0.1", Port: ap,
		Connect: &api.AgentServiceConnect{SidecarService: &api.AgentServiceRegistration{
			Address: "127.0.0.1", Port: sidecarPort,
			Checks: api.AgentServiceChecks{{CheckID: "db-sidecar:ttl", TTL: "10m", Status: api.HealthPassing}},
		}}})
	cmd := exec.Command(bin, "connect", "proxy", "-sidecar-for", "db-1", "-http-addr", consul.Addr(), "-log-level", "debug")
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR="+consul.Addr())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("consul connect proxy:\n%s", logs)
		}
	})

	// The gateway starts once the proxy listens: failed dials before then
	// would eject the sidecar (outlier detection) for the impostor part.
	waitUntil(t, "the built-in proxy listens", 15*time.Second, func() bool {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(sidecarPort)))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	cfg := outboundConfig("web", consul.Addr(), "db")
	cfg = cfg[:len(cfg)-2] + "  timeouts { idle = \"200ms\" }\n}\n"
	g := start(t, cfg)
	var code int
	var body string
	defer func() {
		if t.Failed() {
			t.Logf("last answer: %d %q %v\ngateway:\n%s", code, body, err, g.logs)
		}
	}()
	waitUntil(t, "the gateway reaches db through the built-in proxy", 30*time.Second, func() bool {
		code, body, err = outboundGet(g, "/hello")
		return code == 200 && body == "db"
	})

	// An impostor among db's instances: a Connect-native "db" presenting a
	// valid leaf of service other. Its handshakes fail verification, which
	// are connect failures: the request is retried on the real db, and the
	// impostor is ejected (outlier detection), never sent a request.
	addr, requests := impostor(t, consul, "other")
	host, p, _ := net.SplitHostPort(addr)
	ip, _ := strconv.Atoi(p)
	consul.Register(t, api.AgentServiceRegistration{ID: "db-impostor", Name: "db", Address: host, Port: ip,
		Connect: &api.AgentServiceConnect{Native: true}})
	waitUntil(t, "the impostor is ejected", 15*time.Second, func() bool {
		code, body, err = outboundGet(g, "/hello")
		if code != 200 || body != "db" {
			t.Fatalf("with the impostor among the instances: %d %q %v, want db's answer", code, body, err)
		}
		l := g.logs.String()
		return strings.Contains(l, "backend ejected") && strings.Contains(l, "db-impostor")
	})
	if n := requests.Load(); n != 0 {
		t.Fatalf("the impostor served %d requests", n)
	}

	intention := func(action api.IntentionAction) {
		t.Helper()
		if _, _, err := consul.Client().ConfigEntries().Set(&api.ServiceIntentionsConfigEntry{
			Kind: api.ServiceIntentions, Name: "db",
			Sources: []*api.SourceIntention{{Name: "web", Action: action}}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	intention(api.IntentionActionDeny)
	waitUntil(t, "the proxy's deny of web → db answers 502", 15*time.Second, func() bool {
		time.Sleep(300 * time.Millisecond) // the pooled connection idles out: a new one is authorized
		code, body, err = outboundGet(g, "/hello")
		return err == nil && code == http.StatusBadGateway
	})
	t.Logf("under the deny: %d %q", code, body)
	intention(api.IntentionActionAllow)
	waitUntil(t, "the allow lets the gateway through again", 10*time.Second, func() bool {
		code, body, err = outboundGet(g, "/hello")
		return code == 200 && body == "db"
	})
}

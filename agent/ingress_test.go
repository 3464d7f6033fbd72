package agent

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"
)

// clientsByProtocol are clients for h1, h2 and h3 that trust r's listener.
func (r *running) clientsByProtocol(t *testing.T) map[string]*http.Client {
	// One tls.Config each: net/http adds its ALPN names to the one it is given.
	tc := func() *tls.Config { return &tls.Config{RootCAs: r.roots, ServerName: "localhost"} }
	h1 := &http.Transport{TLSClientConfig: tc(), Protocols: new(http.Protocols)}
	h1.Protocols.SetHTTP1(true)
	h2 := &http.Transport{TLSClientConfig: tc(), Protocols: new(http.Protocols)}
	h2.Protocols.SetHTTP2(true)
	h3 := &http3.Transport{TLSClientConfig: tc()}
	t.Cleanup(func() { h1.CloseIdleConnections(); h2.CloseIdleConnections(); h3.Close() })
	return map[string]*http.Client{"h1": {Transport: h1}, "h2": {Transport: h2}, "h3": {Transport: h3}}
}

func status(t *testing.T, c *http.Client, url string) (int, int) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.ProtoMajor
}

// TestReloadAndReadinessOverEveryProtocol: readiness, routing and a reload
// that changes routes and protocols behave the same over h1, h2 and h3.
func TestReloadAndReadinessOverEveryProtocol(t *testing.T) {
	be := backend(t, "a")
	// cfg is a start template: %[1]q and %[2]q are the certificate files.
	cfg := func(prefix, protocols string) string {
		return `
control {
  address = "127.0.0.1:0"
}
listener "main" {
  address = "127.0.0.1:0"
  ` + protocols + `
  tls {
    cert_file = %[1]q
    key_file  = %[2]q
  }
}
upstream "a" {
  route {
    path_prefix = "` + prefix + `"
  }
  backend "a" {
    address = "` + be.URL + `"
  }
}
`
	}
	r := start(t, cfg("/a", ""))
	clients := r.clientsByProtocol(t)
	eventually(t, func() bool { code, _ := r.control("GET", "/v1/ready", ""); return code == 200 })
	for p, c := range clients {
		if code, major := status(t, c, r.url("main", "/a")); code != 200 || major != int(p[1]-'0') {
			t.Errorf("%s: /a %d over HTTP/%d", p, code, major)
		}
	}
	rewrite := func(prefix, protocols string) {
		certFile, keyFile := r.dir+"/cert.pem", r.dir+"/key.pem"
		if err := os.WriteFile(r.cfg, []byte(fmt.Sprintf(cfg(prefix, protocols), certFile, keyFile)), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, body := r.control("POST", "/v1/reload", ""); code != 200 {
			t.Fatalf("reload: %d %s", code, body)
		}
	}
	rewrite("/b", "")
	for p, c := range clients {
		a, _ := status(t, c, r.url("main", "/a"))
		b, _ := status(t, c, r.url("main", "/b"))
		if a != 404 || b != 200 {
			t.Errorf("%s after reload: /a %d, /b %d", p, a, b)
		}
	}
	addr := r.a.ListenerAddrs()["main"].String()
	rewrite("/b", `protocols = ["h3"]`)
	eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	if code, _ := status(t, clients["h3"], r.url("main", "/b")); code != 200 {
		t.Errorf("h3 after turning TCP off: %d", code)
	}
	if code, _ := r.control("GET", "/v1/ready", ""); code != 200 {
		t.Errorf("/v1/ready after a protocol change: %d", code)
	}
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

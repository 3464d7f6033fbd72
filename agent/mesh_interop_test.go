package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

// TestM05MeshBuiltinProxyInterop: Consul's own built-in proxy (`consul
// connect proxy -service client -upstream web:PORT`, a Connect peer we did
// not write) reaches the gateway's mesh listener, registered as the
// Connect-native service web: both sides verify each other's leaf and the
// gateway sees the proxy's identity, client. An intention deny of
// client → web then stops it, and an allow lets it through again.
//
// The built-in proxy forwards bytes and negotiates no ALPN, so the
// gateway serves HTTP/1.1 on its connections: the local client speaks
// HTTP/1.1, as plain curl does.
func TestM05MeshBuiltinProxyInterop(t *testing.T) {
	e := startMesh(t)
	bin := os.Getenv("CONSUL_BIN")
	if bin == "" {
		t.Fatal("CONSUL_BIN is not set (bash scripts/consul.sh prints it)")
	}
	_, meshPort, _ := net.SplitHostPort(e.r.a.ListenerAddrs()["mesh"].String())
	port, _ := strconv.Atoi(meshPort)
	e.consul.Register(t, api.AgentServiceRegistration{ID: "web-1", Name: "web", Address: "127.0.0.1", Port: port,
		Connect: &api.AgentServiceConnect{Native: true}})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	local := ln.Addr().String()
	_, localPort, _ := net.SplitHostPort(local)
	ln.Close()
	cmd := exec.Command(bin, "connect", "proxy", "-service", "client", "-upstream", "web:"+localPort,
		"-http-addr", e.consul.Addr(), "-log-level", "debug")
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR="+e.consul.Addr())
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

	try := func() (int, error) {
		tr := &http.Transport{DisableKeepAlives: true} // HTTP/1.1, as plain curl

		defer tr.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+local+"/hello", nil)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return resp.StatusCode, fmt.Errorf("status %d", resp.StatusCode)
		}
		return 200, nil
	}
	var last error
	defer func() {
		if t.Failed() {
			t.Logf("last error through the proxy: %v", last)
		}
	}()
	waitUntil(t, "the built-in proxy reaches the mesh listener", 30*time.Second, func() bool {
		_, last = try()
		return last == nil
	})
	if m := e.metricsText(t); !strings.Contains(m, `impulse_connect_authorizations{result="allow",source="client"}`) {
		t.Error("the gateway did not see the proxy as client")
	}
	e.setIntentions(t, &api.SourceIntention{Name: "client", Action: api.IntentionActionDeny})
	waitUntil(t, "the deny stops the built-in proxy", 10*time.Second, func() bool {
		_, err := try()
		return err != nil
	})
	e.setIntentions(t, &api.SourceIntention{Name: "client", Action: api.IntentionActionAllow})
	waitUntil(t, "the allow lets it through again", 10*time.Second, func() bool {
		_, err := try()
		return err == nil
	})
}

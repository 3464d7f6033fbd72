package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestWebSocketFromConfig: a route of the configuration tunnels WebSocket by
// default and refuses it with `upgrades = []`; /v1/routes shows both.
func TestWebSocketFromConfig(t *testing.T) {
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if c.Write(r.Context(), typ, msg) != nil {
				return
			}
		}
	}))
	t.Cleanup(echo.Close)
	r := start(t, baseConfig+fmt.Sprintf(`
upstream "ws" {
  route {
    path_prefix = "/ws"
  }
  backend "a" {
    address = "http://%[1]s"
  }
}
upstream "plain" {
  route {
    path_prefix = "/plain"
    upgrades    = []
  }
  backend "a" {
    address = "http://%[1]s"
  }
}
`, echo.Listener.Addr()))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: r.roots, ServerName: "localhost"}, Protocols: new(http.Protocols)}
	tr.Protocols.SetHTTP1(true)
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wsURL := "wss" + strings.TrimPrefix(r.url("main", ""), "https")
	c, _, err := websocket.Dial(ctx, wsURL+"/ws", &websocket.DialOptions{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.Read(ctx); err != nil || string(msg) != "hello" {
		t.Fatalf("echo %q, %v", msg, err)
	}
	c.Close(websocket.StatusNormalClosure, "")
	_, resp, err := websocket.Dial(ctx, wsURL+"/plain", &websocket.DialOptions{HTTPClient: hc})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Impulse-Error") != "upgrade_not_allowed" {
		t.Fatalf("upgrades = []: %v, %v", resp, err)
	}
	_, body := r.control("GET", "/v1/routes", "")
	var routes []struct {
		Upstream string
		Upgrades []string
	}
	if err := json.Unmarshal([]byte(body), &routes); err != nil || len(routes) != 2 ||
		routes[0].Upstream != "plain" || routes[0].Upgrades == nil || len(routes[0].Upgrades) != 0 ||
		len(routes[1].Upgrades) != 1 || routes[1].Upgrades[0] != "websocket" {
		t.Fatalf("/v1/routes: %v %s", err, body)
	}
}

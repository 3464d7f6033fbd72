package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestH2CStaticBackend: a static backend `address = "h2c://..."` in the
// configuration is reached over cleartext HTTP/2 with prior knowledge (the
// backend speaks nothing else), its active check passes over h2c, and
// /v1/backends reports protocol h2c.
func TestH2CStaticBackend(t *testing.T) {
	var proto, checks atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			if r.ProtoMajor == 2 && r.TLS == nil {
				checks.Add(1)
			}
			return
		}
		if r.ProtoMajor == 2 && r.TLS == nil {
			proto.Add(1)
		}
		io.WriteString(w, "h2c")
	}))
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Start()
	t.Cleanup(s.Close)
	r := start(t, baseConfig+fmt.Sprintf(`
upstream "grpc" {
  route {
    path_prefix = "/"
  }
  backend "local" {
    address = "h2c://%s"
  }
  health_check {
    path               = "/health"
    interval           = "50ms"
    timeout            = "50ms"
    healthy_threshold  = 1
    unknown_is_healthy = false
  }
}
`, s.Listener.Addr()))
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, body := r.control("GET", "/v1/backends", "")
		var bs []struct{ Address, Protocol, Health string }
		if err := json.Unmarshal([]byte(body), &bs); err != nil {
			t.Fatalf("/v1/backends: %v: %s", err, body)
		}
		if len(bs) == 1 && bs[0].Health == "healthy" {
			if bs[0].Protocol != "h2c" || bs[0].Address != "h2c://"+s.Listener.Addr().String() {
				t.Fatalf("/v1/backends: %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the h2c backend never became healthy: %s", body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, body := r.get(t, r.url("main", "/x")); code != 200 || body != "h2c" {
		t.Fatalf("GET: %d %q", code, body)
	}
	if proto.Load() != 1 || checks.Load() == 0 {
		t.Fatalf("%d requests and %d checks over cleartext HTTP/2", proto.Load(), checks.Load())
	}
}

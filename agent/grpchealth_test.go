package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestGRPCHealthCheckStaticH2C: `health_check { grpc = true grpc_service =
// "pkg.Svc" }` on a static h2c:// backend (a grpc-go server with the
// standard health service) makes the backend healthy while pkg.Svc is
// SERVING, unhealthy with reason "grpc NOT_SERVING" in /v1/backends (and
// no traffic: 503) when it is not, and healthy again after.
func TestGRPCHealthCheckStaticH2C(t *testing.T) {
	hs := grpchealth.NewServer()
	hs.SetServingStatus("pkg.Svc", healthpb.HealthCheckResponse_SERVING)
	srv := grpc.NewServer(grpc.Creds(insecure.NewCredentials()))
	healthpb.RegisterHealthServer(srv, hs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })

	r := start(t, baseConfig+fmt.Sprintf(`
upstream "grpc" {
  route {
    path_prefix = "/"
  }
  backend "local" {
    address = "h2c://%s"
  }
  health_check {
    grpc                = true
    grpc_service        = "pkg.Svc"
    interval            = "100ms"
    timeout             = "100ms"
    healthy_threshold   = 1
    unhealthy_threshold = 1
    unknown_is_healthy  = false
  }
}
`, ln.Addr()))
	backend := func() (health, reason string) {
		_, body := r.control("GET", "/v1/backends", "")
		var bs []struct {
			Health       string `json:"health"`
			HealthReason string `json:"health_reason"`
		}
		if err := json.Unmarshal([]byte(body), &bs); err != nil || len(bs) != 1 {
			t.Fatalf("/v1/backends: %v: %s", err, body)
		}
		return bs[0].Health, bs[0].HealthReason
	}
	waitUntil := func(what string, cond func(health, reason string) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			h, reason := backend()
			if cond(h, reason) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %s: health %q reason %q", what, h, reason)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitUntil("healthy", func(h, _ string) bool { return h == "healthy" })

	hs.SetServingStatus("pkg.Svc", healthpb.HealthCheckResponse_NOT_SERVING)
	waitUntil("unhealthy, NOT_SERVING", func(h, reason string) bool { return h == "unhealthy" && reason == "grpc NOT_SERVING" })
	if code, _ := r.get(t, r.url("main", "/pkg.Svc/Call")); code != 503 {
		t.Fatalf("GET while NOT_SERVING: %d, want 503", code)
	}

	hs.SetServingStatus("pkg.Svc", healthpb.HealthCheckResponse_SERVING)
	waitUntil("healthy again", func(h, _ string) bool { return h == "healthy" })
}

package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// newGRPCHealthServer is a grpc-go server with the standard health service
// (hs), over TLS with the package certificate when tlsOn, else h2c.
func newGRPCHealthServer(t *testing.T, hs *grpchealth.Server, tlsOn bool) (host string, port int) {
	t.Helper()
	creds := insecure.NewCredentials()
	if tlsOn {
		creds = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert.TLS}})
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	healthpb.RegisterHealthServer(srv, hs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	a := ln.Addr().(*net.TCPAddr)
	return a.IP.String(), a.Port
}

// TestConsulGRPCHealthCheck: health_check grpc = true on Consul-discovered
// instances: an https instance (the upstream's scheme) and an h2c one
// (ServiceMeta impulse-scheme) pass while SERVING; the h2c one turning
// NOT_SERVING becomes unhealthy with that reason and gets no requests,
// then comes back; an instance whose ServiceMeta says http (known only at
// run time) fails its check with a reason saying gRPC needs HTTP/2.
func TestConsulGRPCHealthCheck(t *testing.T) {
	consul := sharedConsul(t)
	ids := []string{"grpch-tls-1", "grpch-h2c-1", "grpch-h1-1"}
	t.Cleanup(func() {
		for _, id := range ids {
			_ = consul.Client().Agent().ServiceDeregister(id)
		}
	})
	hsTLS, hsH2C := grpchealth.NewServer(), grpchealth.NewServer()
	h, p := newGRPCHealthServer(t, hsTLS, true)
	consul.RegisterTTL(t, ids[0], "e2e-grpc-health", h, p, nil, nil)
	h, p = newGRPCHealthServer(t, hsH2C, false)
	consul.RegisterTTL(t, ids[1], "e2e-grpc-health", h, p, nil, map[string]string{"impulse-scheme": "h2c"})
	h1 := newHTTP1Backend(t, "h1")
	consul.RegisterTTL(t, ids[2], "e2e-grpc-health", h1.Host, h1.Port, nil, map[string]string{"impulse-scheme": "http"})

	a := startAgent(t, baseHCL()+fmt.Sprintf(`
consul {
  address = %q
  wait    = "5s"
}

upstream "grpc-health" {
  route {
    path_prefix = "/grpch/"
  }
  consul {
    service = "e2e-grpc-health"
  }
  tls {
    ca_file = %q
  }
  health_check {
    grpc                = true
    interval            = "100ms"
    timeout             = "100ms"
    healthy_threshold   = 1
    unhealthy_threshold = 1
    unknown_is_healthy  = false
  }
}
`, consul.Addr(), certFile))
	type info struct {
		ID           string `json:"id"`
		Protocol     string `json:"protocol"`
		Health       string `json:"health"`
		HealthReason string `json:"health_reason"`
		Requests     uint64 `json:"requests"`
	}
	byProtocol := func() map[string]info {
		code, body := a.control("GET", "/v1/backends", nil)
		if code != http.StatusOK {
			t.Fatalf("/v1/backends: %d %s", code, body)
		}
		var bs []info
		if err := json.Unmarshal(body, &bs); err != nil {
			t.Fatalf("/v1/backends: %v in %s", err, body)
		}
		out := map[string]info{}
		for _, b := range bs {
			out[b.Protocol] = b
		}
		return out
	}
	const needsHTTP2 = "grpc check needs an h2c:// or https:// backend, not http:// (HTTP/1.1)"
	waitFor(t, 15*time.Second, "h2 and h2c instances healthy, the http one failing", func() bool {
		bs := byProtocol()
		return bs["h2"].Health == "healthy" && bs["h2c"].Health == "healthy" &&
			bs["http/1.1"].Health == "unhealthy" && bs["http/1.1"].HealthReason == needsHTTP2
	})

	hsH2C.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	waitFor(t, 10*time.Second, "the h2c instance unhealthy with grpc NOT_SERVING", func() bool {
		b := byProtocol()["h2c"]
		return b.Health == "unhealthy" && b.HealthReason == "grpc NOT_SERVING"
	})
	before := byProtocol()["h2c"].Requests
	c, _ := newH3Client(t)
	for range 5 {
		mustGet(t, c, a.URL("/grpch/x")) // answered by the https instance (grpc-go refuses a GET; any answer will do)
	}
	if bs := byProtocol(); bs["h2c"].Requests != before || bs["h2"].Requests < 5 || h1.Hits() != 0 {
		t.Fatalf("requests while h2c is NOT_SERVING: h2c %d (was %d), h2 %d, http %d", bs["h2c"].Requests, before, bs["h2"].Requests, h1.Hits())
	}

	hsH2C.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	waitFor(t, 10*time.Second, "the h2c instance healthy again", func() bool { return byProtocol()["h2c"].Health == "healthy" })
}

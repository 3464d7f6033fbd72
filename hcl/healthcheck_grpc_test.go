package hcl

import (
	"testing"
	"time"
)

// TestHealthCheckGRPC: grpc = true with h2c:// and https:// backends (and
// discovered ones reached over https by default) parses, drops the HTTP
// path and keeps grpc_service; without grpc_service the whole server is
// asked about.
func TestHealthCheckGRPC(t *testing.T) {
	cfg := mustParse(t, testListener+`
consul {}
upstream "grpc" {
  route {}
  health_check {
    grpc         = true
    grpc_service = "pkg.Svc"
    interval     = "2s"
  }
  backend "a" {
    address = "h2c://127.0.0.1:9090"
  }
  backend "b" {
    address = "https://127.0.0.1:9443"
  }
  consul {
    service = "grpc"
  }
}
upstream "whole" {
  route {
    path_prefix = "/whole/"
  }
  health_check {
    grpc = true
  }
  backend "a" {
    address = "h2c://127.0.0.1:9091"
  }
}`)
	want := HealthCheck{GRPC: true, GRPCService: "pkg.Svc", Interval: 2 * time.Second, Timeout: time.Second,
		HealthyThreshold: 2, UnhealthyThreshold: 3, UnknownIsHealthy: true}
	if got := *cfg.Upstreams[0].HealthCheck; got != want {
		t.Errorf("health_check = %+v, want %+v", got, want)
	}
	want.GRPCService, want.Interval = "", DefaultHealthCheckInterval
	if got := *cfg.Upstreams[1].HealthCheck; got != want {
		t.Errorf("health_check = %+v, want %+v", got, want)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings:\n%s", linesOf(cfg.Warnings))
	}
}

// TestHealthCheckGRPCFalse: grpc = false is the HTTP check, path and all.
func TestHealthCheckGRPCFalse(t *testing.T) {
	cfg := mustParse(t, testListener+`
upstream "web" {
  route {}
  health_check {
    grpc = false
    path = "/ready"
  }
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}`)
	if hc := cfg.Upstreams[0].HealthCheck; hc.GRPC || hc.Path != "/ready" {
		t.Errorf("health_check = %+v", hc)
	}
}

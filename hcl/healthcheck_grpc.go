package hcl

import (
	"fmt"
	"strings"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// buildGRPCCheck reads health_check.grpc and grpc_service into h: grpc =
// true replaces the HTTP check (h.Path becomes ""), so an explicit path is
// an error at path, and grpc_service without grpc = true is an error at
// grpc_service.
func buildGRPCCheck(b blk, r *rawHealthCheck, h *HealthCheck) {
	before := b.errCount()
	h.GRPC = b.boolean(r.GRPC, false)
	grpcValid := b.errCount() == before
	h.GRPCService = b.str(r.GRPCService, "")
	switch {
	case !grpcValid:
	case h.GRPC && r.Path != nil:
		b.errorf(r.Path, "", "Conflicting path",
			"path is the request target of the HTTP check; with grpc = true each check calls grpc.health.v1.Health/Check (about grpc_service) instead. Remove path or grpc.")
	case !h.GRPC && r.GRPCService != nil:
		b.errorf(r.GRPCService, "", "Invalid grpc_service", "grpc_service is only used with grpc = true.")
	}
	if h.GRPC {
		h.Path = ""
	}
}

// checkGRPCBackends reports a gRPC health check (health_check.grpc = true)
// on an upstream with static http:// backends, at the grpc attribute: gRPC
// runs over HTTP/2 only. Discovered instances are judged when they appear
// (their check fails with a reason); an upstream whose consul.scheme is
// "http" gets a warning at that scheme.
func checkGRPCBackends(b blk, r *rawUpstream, u *Upstream) {
	if u.HealthCheck == nil || !u.HealthCheck.GRPC {
		return
	}
	hb := b.child("health_check", r.HealthCheck.DefRange)
	var h1 []string
	for _, be := range u.Backends {
		if be.Scheme == "http" {
			h1 = append(h1, fmt.Sprintf("%q (%s)", be.Name, posString(be.Range)))
		}
	}
	if len(h1) > 0 {
		which := "backend " + h1[0] + " is"
		if len(h1) > 1 {
			which = "backends " + strings.Join(h1, ", ") + " are"
		}
		hb.errorf(r.HealthCheck.GRPC, "", "Invalid grpc",
			"a gRPC health check needs HTTP/2 backends (h2c:// or https://); %s http:// (HTTP/1.1).", which)
	}
	if u.Consul != nil && u.Consul.Connect && u.Consul.Protocol == ConnectProtocolHTTP {
		hb.errorf(r.HealthCheck.GRPC, "", "Invalid grpc",
			"a gRPC health check needs HTTP/2 inside the Connect mTLS: set consul { protocol = \"grpc\" } (or \"http2\"); the default, \"http\", is HTTP/1.1.")
	}
	if u.Consul != nil && !u.Consul.Connect && u.Consul.Scheme == "http" && r.Consul != nil && r.Consul.Scheme != nil {
		cb := b.child("consul", r.Consul.DefRange)
		cb.add(hcl2.DiagWarning, cb.subject(r.Consul.Scheme), "gRPC check on HTTP/1.1",
			cb.field("scheme")+": instances are reached over HTTP/1.1 unless their ServiceMeta \"impulse-scheme\" says h2c or https, and fail health_check grpc = true.")
	}
}

// Package impulseagent holds repository-wide tests; the code lives in
// agent/, discovery/, gateway/, hcl/ and cmd/impulse-agent/.
package impulseagent

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencyDirection enforces the one-way flow of architecture.md:
// cmd -> agent -> {hcl, discovery, gateway}; gateway knows nothing of Consul
// or HCL; discovery knows nothing of the gateway or HCL; hcl knows neither.
func TestDependencyDirection(t *testing.T) {
	const mod = "github.com/impulse-agent/impulse-agent/"
	forbidden := map[string][]string{
		"gateway/...":   {mod + "agent", mod + "discovery", mod + "hcl", "github.com/hashicorp/consul", "github.com/hashicorp/hcl", "go.opentelemetry.io/otel/sdk"}, // the OTel API only: the agent owns the SDK
		"discovery/...": {mod + "agent", mod + "gateway", mod + "hcl", "github.com/quic-go"},
		"hcl/...":       {mod + "agent", mod + "gateway", mod + "discovery", "github.com/hashicorp/consul"},
		"agent/...":     {mod + "cmd"},
	}
	for pkgs, bad := range forbidden {
		out, err := exec.Command("go", "list", "-deps", "./"+pkgs).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkgs, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, b := range bad {
				if dep == b || strings.HasPrefix(dep, b+"/") {
					t.Errorf("%s must not depend on %s (found %s)", pkgs, b, dep)
				}
			}
		}
	}
	out, err := exec.Command("go", "list", "-deps", "./cmd/impulse-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "github.com/armon/go-metrics") {
		t.Errorf("the binary links github.com/armon/go-metrics; use only github.com/hashicorp/go-metrics")
	}
}

// TestTestOnlyPackages: the test-support packages (backend doubles,
// throw-away certificates, the lookup of test tools) are imported from
// _test.go files only, so
// none of them is linked into the binary.
func TestTestOnlyPackages(t *testing.T) {
	const mod = "github.com/impulse-agent/impulse-agent/"
	out, err := exec.Command("go", "list", "-deps", "./cmd/impulse-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, p := range []string{"internal/testbackend", "internal/testpki", "internal/testtool", "internal/testjwt"} {
			if dep == mod+p {
				t.Errorf("the binary links %s, a test-only package", dep)
			}
		}
	}
}

// TestGatewayLayout enforces the dataplane's inner direction (README
// "Layout"): the pipeline (package gateway) composes its parts, which
// import each other only this way (direct imports): answer, retry and
// observe know no ingress, tunnel, wire or request-body handling; wire
// builds on observe; reqbody and tunnel on wire; ingress hands requests
// to a Pipeline interface and imports nothing of backends, routes,
// retries or balancing; no part imports the pipeline.
func TestGatewayLayout(t *testing.T) {
	const gw = "github.com/impulse-agent/impulse-agent/gateway"
	parts := []string{"ingress", "tunnel", "wire", "reqbody", "observe", "answer", "retry"}
	forbidden := map[string][]string{
		"answer":  {"ingress", "tunnel", "wire", "reqbody", "observe", "retry", "upstream"},
		"retry":   {"ingress", "tunnel", "wire", "reqbody", "observe", "answer", "upstream"},
		"observe": {"ingress", "tunnel", "wire", "reqbody", "answer"},
		"wire":    {"ingress", "tunnel", "reqbody", "answer", "retry"},
		"reqbody": {"ingress", "tunnel", "answer", "retry", "upstream", "observe"},
		"tunnel":  {"ingress", "reqbody", "answer", "retry"},
		"ingress": {"wire", "reqbody", "retry", "upstream", "route", "balance", "health", "transport"},
	}
	for _, part := range parts {
		out, err := exec.Command("go", "list", "-f", `{{join .Imports "\n"}}`, "./gateway/"+part).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", part, err, out)
		}
		for _, imp := range strings.Fields(string(out)) {
			if imp == gw {
				t.Errorf("gateway/%s imports the pipeline (package gateway)", part)
			}
			for _, bad := range forbidden[part] {
				if imp == gw+"/"+bad {
					t.Errorf("gateway/%s must not import gateway/%s", part, bad)
				}
			}
		}
	}
}

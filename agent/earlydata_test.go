package agent

import (
	"testing"

	"github.com/impulse-agent/impulse-agent/hcl"
)

// TestEarlyDataReachesTheGateway: a listener's early_data arrives in
// gateway.ListenerConfig.EarlyData, off by default.
func TestEarlyDataReachesTheGateway(t *testing.T) {
	cfg, diags := hcl.Parse("t.hcl", []byte(`
listener "on" {
  address    = "127.0.0.1:0"
  early_data = true
  tls {
    cert_file = "../hcl/testdata/certs/cert.pem"
    key_file  = "../hcl/testdata/certs/key.pem"
  }
}
listener "off" {
  address = "127.0.0.1:0"
  tls {
    cert_file = "../hcl/testdata/certs/cert.pem"
    key_file  = "../hcl/testdata/certs/key.pem"
  }
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	gc, err := gatewayConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, l := range gc.Listeners {
		got[l.Name] = l.EarlyData
	}
	if !got["on"] || got["off"] || len(got) != 2 {
		t.Fatalf("EarlyData by listener: %v", got)
	}
}

package hcl

import (
	"slices"
	"strings"
	"testing"
)

// TestDeprecatedProtocol: protocol = "http3" still loads, as ["h3"], with a
// warning at its line that says what to write instead.
func TestDeprecatedProtocol(t *testing.T) {
	src := `listener "old" {
  address  = "127.0.0.1:8443"
  protocol = "http3"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}
`
	cfg, diags := Parse("old.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if !slices.Equal(cfg.Listeners[0].Protocols, []string{"h3"}) {
		t.Errorf("protocols = %v, want [h3]", cfg.Listeners[0].Protocols)
	}
	if len(diags) != 1 || diags[0].Subject.Start.Line != 3 || !strings.Contains(diags[0].Detail, `protocols = ["h3"]`) {
		t.Errorf("want one deprecation warning at line 3, got %v", diags)
	}
}

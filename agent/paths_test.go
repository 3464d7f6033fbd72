package agent

import (
	"testing"

	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/internal/pathnorm"
)

// TestPathOptionsReachTheGateway: normalize_path, merge_slashes and
// escaped_slashes arrive in gateway.Config.Paths; the defaults are the
// gateway's zero value.
func TestPathOptionsReachTheGateway(t *testing.T) {
	cfg, diags := hcl.Parse("t.hcl", []byte(`normalize_path = false
merge_slashes = true
escaped_slashes = "unescape"
listener "l" {
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
	want := pathnorm.PathOptions{ForwardAsSent: true, MergeSlashes: true, EscapedSlashes: pathnorm.EscapedSlashesUnescape}
	if gc.Paths != want {
		t.Fatalf("Paths = %+v, want %+v", gc.Paths, want)
	}
	if got := pathOptions(hcl.DefaultPaths()); got != (pathnorm.PathOptions{}) {
		t.Fatalf("defaults convert to %+v, want the zero value", got)
	}
	for word, v := range map[string]pathnorm.EscapedSlashes{"reject": pathnorm.EscapedSlashesReject, "keep": pathnorm.EscapedSlashesKeep, "unescape": pathnorm.EscapedSlashesUnescape} {
		if got := pathOptions(hcl.Paths{NormalizePath: true, EscapedSlashes: word}).EscapedSlashes; got != v {
			t.Errorf("%q: %v", word, got)
		}
	}
}

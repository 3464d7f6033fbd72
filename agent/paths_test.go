package agent

import (
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/route"
	"github.com/impulse-agent/impulse-agent/hcl"
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
	want := route.PathOptions{ForwardAsSent: true, MergeSlashes: true, EscapedSlashes: route.EscapedSlashesUnescape}
	if gc.Paths != want {
		t.Fatalf("Paths = %+v, want %+v", gc.Paths, want)
	}
	if got := pathOptions(hcl.DefaultPaths()); got != (route.PathOptions{}) {
		t.Fatalf("defaults convert to %+v, want the zero value", got)
	}
	for word, v := range map[string]route.EscapedSlashes{"reject": route.EscapedSlashesReject, "keep": route.EscapedSlashesKeep, "unescape": route.EscapedSlashesUnescape} {
		if got := pathOptions(hcl.Paths{NormalizePath: true, EscapedSlashes: word}).EscapedSlashes; got != v {
			t.Errorf("%q: %v", word, got)
		}
	}
}

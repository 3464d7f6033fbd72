package hcl

import (
	"os"
	"path/filepath"
	"testing"
)

// TestConnectUpstream: consul { connect = true } with its protocol: the
// scheme inside the mTLS connection follows it (HTTP/1.1 by default).
func TestConnectUpstream(t *testing.T) {
	src := `
connect { service = "web" }
listener "public" {
  address = "127.0.0.1:6460"
  tls {
    cert_file = "` + filepath.Join("testdata", "certs", "cert.pem") + `"
    key_file  = "` + filepath.Join("testdata", "certs", "key.pem") + `"
  }
}
upstream "db" {
  route { path_prefix = "/db/" }
  consul {
    service = "db"
    connect = true
  }
}
upstream "rpc" {
  route { path_prefix = "/rpc/" }
  consul {
    service    = "rpc"
    connect    = true
    protocol   = "grpc"
    datacenter = "dc2"
  }
}
`
	path := filepath.Join(t.TempDir(), "c.hcl")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, diags := Load([]string{path})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, tc := range []struct{ name, protocol, scheme string }{{"db", "http", "http"}, {"rpc", "grpc", "https"}} {
		var u *Upstream
		for i := range cfg.Upstreams {
			if cfg.Upstreams[i].Name == tc.name {
				u = &cfg.Upstreams[i]
			}
		}
		if u == nil || u.Consul == nil || !u.Consul.Connect || u.Consul.Protocol != tc.protocol || u.Consul.Scheme != tc.scheme ||
			u.Consul.ConnectRange.Start.Line == 0 {
			t.Errorf("upstream %s: %+v", tc.name, u)
		}
	}
}

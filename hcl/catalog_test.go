package hcl

import (
	"strings"
	"testing"
)

func TestCatalogBlock(t *testing.T) {
	cfg := mustParse(t, testListener+"consul {\n  catalog {}\n}\n")
	if got := *cfg.Consul.Catalog; got != (Catalog{Enabled: true, TagPrefix: "impulse", DefaultScheme: "http"}) {
		t.Errorf("catalog defaults = %+v", got)
	}
	if !cfg.Consul.CatalogEnabled() {
		t.Error("CatalogEnabled() = false for an empty catalog block")
	}

	cfg = mustParse(t, testListener+`consul {
  catalog {
    enabled        = false
    tag_prefix     = "edge.v2"
    default_scheme = "https"
    filter         = "  ServiceMeta.team == \"a\"  "
  }
}
`)
	if got := *cfg.Consul.Catalog; got != (Catalog{TagPrefix: "edge.v2", DefaultScheme: "https", Filter: `ServiceMeta.team == "a"`}) {
		t.Errorf("catalog = %+v", got)
	}
	if cfg.Consul.CatalogEnabled() {
		t.Error("CatalogEnabled() = true with enabled = false")
	}
	if mustParse(t, testListener+"consul {}\n").Consul.CatalogEnabled() || (*Consul)(nil).CatalogEnabled() {
		t.Error("CatalogEnabled() = true without a catalog block")
	}

	// The "consul:" upstream names are reserved only while the mode is on.
	reserved := `
upstream "consul:web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
`
	mustParse(t, testListener+"consul {\n  catalog {\n    enabled = false\n  }\n}\n"+reserved)
	mustParse(t, testListener+reserved)
	if got := parseErrors(t, testListener+"consul {\n  catalog {}\n}\n"+reserved); !strings.Contains(got, `test.hcl:13:1: Reserved upstream name: upstream "consul:web"`) {
		t.Errorf("diagnostics:\n%s", got)
	}
}

func TestParseCatalogRoute(t *testing.T) {
	for _, tc := range []struct {
		in         string
		host, path string
		err        string
	}{
		{in: "/api", path: "/api"},
		{in: " /api/ ", path: "/api/"},
		{in: "/", path: "/"},
		{in: "www.Example.com/shop", host: "www.example.com", path: "/shop"},
		{in: "www.example.com", host: "www.example.com", path: "/"},
		{in: "*.example.com/", host: "*.example.com", path: "/"},
		{in: "10.0.0.1/x", host: "10.0.0.1", path: "/x"},
		{in: "[::1]/x", host: "::1", path: "/x"},
		{in: "/a/b/c", path: "/a/b/c"},
		{in: "", err: "empty route"},
		{in: "   ", err: "empty route"},
		{in: "example.com:8443/x", err: "must not include a port"},
		{in: "a*.example.com/", err: "wildcard"},
		{in: "*.*.example.com/", err: "wildcard"},
		{in: "exa mple.com/", err: "not a valid host name"},
		{in: "/x?y=1", err: "query or fragment"},
		{in: "/x#y", err: "query or fragment"},
		{in: "/a b", err: "spaces or control characters"},
		{in: "/a\tb", err: "spaces or control characters"},
		{in: "http://x/y", err: "without a scheme"},
		{in: "//", err: "empty segment"},
		{in: "/a/../b", err: `".." segment`},
		{in: "/a/./b", err: `"." segment`},
		{in: "/%zz", err: "percent-encoding"},
	} {
		r, err := ParseCatalogRoute(tc.in)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseCatalogRoute(%q) = %+v, %v; want an error containing %q", tc.in, r, err, tc.err)
			}
		case err != nil:
			t.Errorf("ParseCatalogRoute(%q): %v", tc.in, err)
		case r.Host != tc.host || r.PathPrefix != tc.path || r.Methods != nil:
			t.Errorf("ParseCatalogRoute(%q) = %+v; want host %q path %q", tc.in, r, tc.host, tc.path)
		}
	}
}

func TestLoadBalancingPolicies(t *testing.T) {
	p := LoadBalancingPolicies()
	if len(p) != 5 || p[0] != "round_robin" {
		t.Fatalf("LoadBalancingPolicies() = %v", p)
	}
	p[0] = "changed"
	if LoadBalancingPolicies()[0] != "round_robin" {
		t.Fatal("LoadBalancingPolicies returns the package's slice")
	}
}

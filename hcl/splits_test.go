package hcl

import (
	"testing"
)

// splitSrc is a file with upstream "web" (no backend) whose one route has
// body, and upstreams web-v1 and web-v2 to split to.
func splitSrc(body string) string {
	return testListener + "upstream \"web\" {\n  route {\n" + body + "\n  }\n}\n" + `upstream "web-v1" {
  route { path_prefix = "/v1/" }
  backend "a" { address = "http://127.0.0.1:8081" }
}
upstream "web-v2" {
  route { path_prefix = "/v2/" }
  backend "a" { address = "http://127.0.0.1:8082" }
}
`
}

// TestRouteSplits: case N04's configuration converts: split blocks in
// order, sticky; an upstream whose routes all split needs no backend;
// sticky = "" (interface.md's default written out) is none.
func TestRouteSplits(t *testing.T) {
	cfg := mustParse(t, splitSrc(`    split {
      upstream = "web-v1"
      weight   = 90
    }
    split {
      upstream = "web-v2"
      weight   = 10
    }
    sticky = "cookie:session"`))
	rt := cfg.Upstreams[0].Routes[0]
	if len(rt.Splits) != 2 || rt.Splits[0].Upstream != "web-v1" || rt.Splits[0].Weight != 90 ||
		rt.Splits[1].Upstream != "web-v2" || rt.Splits[1].Weight != 10 || rt.Sticky != "cookie:session" {
		t.Errorf("route = %+v", rt)
	}
	cfg = mustParse(t, splitSrc("    split {\n upstream = \"web-v1\"\n weight = 1\n }\n    split {\n upstream = \"web-v2\"\n weight = 0\n }\n    sticky = \"\""))
	if rt := cfg.Upstreams[0].Routes[0]; rt.Sticky != "" || len(rt.Splits) != 2 {
		t.Errorf("route = %+v", rt)
	}
	if rt := cfg.Upstreams[1].Routes[0]; rt.Splits != nil {
		t.Errorf("route without splits: %+v", rt.Splits)
	}
}

// TestRouteSplitErrors: each bad split is an error at its file:line:column.
func TestRouteSplitErrors(t *testing.T) {
	for _, tc := range []struct {
		body, at, want string
	}{
		{"split {\n upstream = \"web-v1\"\n weight = 0\n }\n split {\n upstream = \"web-v2\"\n weight = 0\n }", "split {", "Weights sum to 0"},
		{"split {\n upstream = \"web-v1\"\n weight = -1\n }\n split {\n upstream = \"web-v2\"\n weight = 2\n }", `-1`, "out of range"},
		{"split {\n upstream = \"web-v1\"\n weight = 1.5\n }", `1.5`, "whole number"},
		{"split {\n upstream = \"nope\"\n weight = 1\n }", `"nope"`, `upstream "web" route split upstream: no upstream named "nope" is defined`},
		{"split {\n upstream = \"web-v1\"\n weight = 1\n }\n split {\n upstream = \"web-v1\"\n weight = 2\n }", "2nd \"web-v1\"", "Duplicate split"},
		{"split {\n upstream = \"web-v1\"\n weight = 1\n }\n redirect { to = \"https://a.example\" }", `redirect {`, "Split on a redirect"},
		{`split { weight = 1 }`, `split {`, "Missing upstream"},
		{`split { upstream = "web-v1" }`, `split {`, "Missing weight"},
		{"split {\n upstream = \"web-v1\"\n weight = 1\n }\n sticky = \"cookie:\"", `"cookie:"`, "Invalid sticky"},
		{"split {\n upstream = \"web-v1\"\n weight = 1\n }\n sticky = \"header:Host\"", `"header:Host"`, "Invalid sticky"},
		{"path_prefix = \"/\"\n sticky = \"client_ip\"", `"client_ip"`, "Sticky without splits"},
	} {
		src := splitSrc("    " + tc.body)
		wantErrorAt(t, src, tc.at, tc.want, tc.body)
	}
}

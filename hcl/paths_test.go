package hcl

import (
	"strings"
	"testing"
)

func TestPathSettings(t *testing.T) {
	for src, want := range map[string]Paths{
		``:                             DefaultPaths(),
		`normalize_path = false`:       {NormalizePath: false, EscapedSlashes: "reject"},
		`merge_slashes = true`:         {NormalizePath: true, MergeSlashes: true, EscapedSlashes: "reject"},
		`escaped_slashes = "unescape"`: {NormalizePath: true, EscapedSlashes: "unescape"},
		"escaped_slashes = \"keep\"\nmerge_slashes = false": {NormalizePath: true, EscapedSlashes: "keep"},
	} {
		cfg, diags := Parse("t.hcl", []byte(src+"\n"+testListener))
		if diags.HasErrors() {
			t.Fatalf("%q: %s", src, linesOf(diags))
		}
		if cfg.Paths != want {
			t.Errorf("%q: %+v, want %+v", src, cfg.Paths, want)
		}
	}
	if DefaultPaths() != (Paths{NormalizePath: true, EscapedSlashes: "reject"}) {
		t.Errorf("defaults: %+v", DefaultPaths())
	}
}

// TestPathPrefixMustBeNormal: a path_prefix is compared in normal form with
// the request's normalised path, so one that normalisation would change in
// meaning is an error at its source position.
func TestPathPrefixMustBeNormal(t *testing.T) {
	for _, p := range []string{"/a/%2e%2E", "/a/./b", "/a\\b", "/a%00", "/a%0d%0a", "/a b", "/a%zz", "/a//b", "a", "/a/..;/b", "/a/.;/b", "/a/%2e%2e;/b"} {
		src := "upstream \"u\" {\n  route { path_prefix = \"" + strings.ReplaceAll(p, "\\", "\\\\") + "\" }\n  backend \"b\" { address = \"http://127.0.0.1:1\" }\n}\n"
		_, diags := Parse("t.hcl", []byte(src))
		if !diags.HasErrors() || !strings.Contains(linesOf(diags), "t.hcl:2:") || !strings.Contains(linesOf(diags), "Invalid path_prefix") {
			t.Errorf("path_prefix %q: %s", p, linesOf(diags))
		}
	}
	for _, p := range []string{"/", "/api/", "/%7Eu", "/caf%C3%A9", "/a;v=1", "/a/.well-known", "/a%20b"} {
		src := "upstream \"u\" {\n  route { path_prefix = \"" + p + "\" }\n  backend \"b\" { address = \"http://127.0.0.1:1\" }\n}\n"
		if _, diags := Parse("t.hcl", []byte(src)); strings.Contains(linesOf(diags), "path_prefix") {
			t.Errorf("path_prefix %q: %s", p, linesOf(diags))
		}
	}
}

// TestUnreachablePrefix: a prefix with an escaped slash is refused unless
// escaped_slashes = "keep", where it can match.
func TestUnreachablePrefix(t *testing.T) {
	for _, es := range []string{"", `escaped_slashes = "reject"`, `escaped_slashes = "unescape"`, `escaped_slashes = "keep"`} {
		src := es + "\nupstream \"u\" {\n  route { path_prefix = \"/x/%2f/y\" }\n  backend \"b\" { address = \"http://127.0.0.1:1\" }\n}\n"
		_, diags := Parse("t.hcl", []byte(src))
		got := linesOf(diags)
		if keep := strings.Contains(es, "keep"); keep == strings.Contains(got, "Unreachable route") {
			t.Errorf("%q: diagnostics %s", es, got)
		}
		if !strings.Contains(es, "keep") && !strings.Contains(got, "t.hcl:3:") {
			t.Errorf("%q: the error is not at the route: %s", es, got)
		}
	}
}

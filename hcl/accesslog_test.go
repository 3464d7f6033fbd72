package hcl

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAccessLogBlock: no block, no access log; an empty block logs JSON
// to stdout without queries; every attribute is read; checking a file
// path leaves no file behind, and an existing file is kept.
func TestAccessLogBlock(t *testing.T) {
	parse := func(block string) *Config {
		t.Helper()
		cfg, diags := Parse("access.hcl", []byte(block+"\n"+testListener))
		if diags.HasErrors() {
			t.Fatalf("%s: %v", block, diags)
		}
		return cfg
	}
	if cfg := parse(""); cfg.AccessLog != nil {
		t.Errorf("no block: %+v, want nil (off)", cfg.AccessLog)
	}
	if got := *parse("access_log {}").AccessLog; got != (AccessLog{Path: "stdout", Format: "json"}) {
		t.Errorf("empty block: %+v", got)
	}
	a := parse(`access_log {
  path          = "stderr"
  format        = "combined"
  include_query = true
}`).AccessLog
	if a.Path != "stderr" || a.Format != "combined" || !a.IncludeQuery || a.PathRange.Start.Line != 2 {
		t.Errorf("full block: %+v", a)
	}
	path := filepath.Join(t.TempDir(), "access.log")
	if got := parse(`access_log { path = "` + path + `" }`).AccessLog.Path; got != path {
		t.Errorf("path %q", got)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("checking the path left a file behind: %v", err)
	}
	os.WriteFile(path, []byte("kept\n"), 0o640)
	parse(`access_log { path = "` + path + `" }`)
	if b, _ := os.ReadFile(path); string(b) != "kept\n" {
		t.Errorf("an existing log file became %q", b)
	}
}

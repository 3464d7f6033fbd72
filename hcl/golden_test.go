package hcl

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// goldenCases lists the configurations under dir: every *.hcl and *.json
// file and every subdirectory (loaded as a config directory), each with
// NAME.golden beside.
func goldenCases(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var cases []string
	for _, e := range entries {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".hcl") || strings.HasSuffix(e.Name(), ".json") {
			cases = append(cases, filepath.Join(dir, e.Name()))
		}
	}
	return cases
}

func checkGolden(t *testing.T, path string, diags hcl2.Diagnostics) {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteDiagnosticLines(&buf, diags); err != nil {
		t.Fatal(err)
	}
	golden := strings.TrimSuffix(strings.TrimSuffix(path, ".hcl"), ".json") + ".golden"
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got := buf.String(); got != string(want) {
		t.Errorf("diagnostics differ from %s (run go test -update to accept)\n--- got\n%s--- want\n%s", golden, got, want)
	}
}

func TestGoldenBad(t *testing.T) {
	cases := goldenCases(t, "testdata/bad")
	if len(cases) < 14 {
		t.Fatalf("only %d bad configurations", len(cases))
	}
	for _, path := range cases {
		t.Run(filepath.Base(path), func(t *testing.T) {
			cfg, diags := Load([]string{path})
			if !diags.HasErrors() {
				t.Fatalf("no error for %s: %v", path, diags)
			}
			if cfg != nil {
				t.Error("Config returned despite errors")
			}
			for _, d := range diags {
				if d.Severity == hcl2.DiagError && d.Subject == nil {
					t.Errorf("error without a source range: %s", FormatDiagnostic(d))
				}
			}
			checkGolden(t, path, diags)
		})
	}
}

func TestGoldenGood(t *testing.T) {
	for _, path := range goldenCases(t, "testdata/good") {
		t.Run(filepath.Base(path), func(t *testing.T) {
			cfg, diags := Load([]string{path})
			if diags.HasErrors() {
				t.Fatalf("unexpected errors:\n%s", linesOf(diags))
			}
			if len(cfg.Warnings) != len(diags) {
				t.Errorf("Config.Warnings has %d entries, diagnostics %d", len(cfg.Warnings), len(diags))
			}
			checkGolden(t, path, diags)
		})
	}
}

// TestGoodWarnings pins the "Not yet supported" warnings of the example
// configurations independently of the golden files.
func TestGoodWarnings(t *testing.T) {
	tests := map[string][]string{
		"testdata/good/full.hcl":        nil,
		"testdata/good/minimal.hcl":     nil,
		"testdata/good/implemented.hcl": nil,
		"testdata/good/unsupported.hcl": {},
		"testdata/good/limits.hcl":      nil,
	}
	for path, want := range tests {
		cfg, diags := Load([]string{path})
		if diags.HasErrors() {
			t.Fatalf("%s: %s", path, linesOf(diags))
		}
		if len(cfg.Warnings) != len(want) {
			t.Errorf("%s: %d warnings, want %d:\n%s", path, len(cfg.Warnings), len(want), linesOf(cfg.Warnings))
			continue
		}
		for _, w := range cfg.Warnings {
			if w.Summary != "Not yet supported" || w.Subject == nil {
				t.Errorf("%s: unexpected warning %s", path, FormatDiagnostic(w))
			}
		}
		for _, frag := range want {
			found := false
			for _, w := range cfg.Warnings {
				line := FormatDiagnostic(w)
				found = found || containsAll(line, strings.Split(frag, " ")...)
			}
			if !found {
				t.Errorf("%s: no warning mentioning %q in:\n%s", path, frag, linesOf(cfg.Warnings))
			}
		}
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func linesOf(diags hcl2.Diagnostics) string {
	var buf bytes.Buffer
	_ = WriteDiagnosticLines(&buf, diags)
	return buf.String()
}

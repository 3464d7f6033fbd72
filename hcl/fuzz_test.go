package hcl

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// FuzzParse feeds arbitrary bytes to the loader, as native HCL or as HCL's
// JSON syntax. Whatever the input, Parse must not panic, must say why it
// refuses a configuration (an error diagnostic, never a nil Config without
// one), and every diagnostic must point into the input: a Subject (and a
// Context, when set) naming the file, with byte offsets inside the source and
// the line and column those offsets are at. Both renderings an operator sees
// (FormatDiagnostic lines and hcl's snippet writer) must not panic either.
//
// The seeds are the golden configurations (testdata/good, testdata/bad); TLS
// files they name resolve against the package directory, so the fuzzer
// reaches the checks behind a loadable listener.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/good", "testdata/bad"} {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.hcl"))
		js, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, p := range append(paths, js...) {
			src, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(src, strings.HasSuffix(p, ".json"))
		}
	}
	f.Add([]byte("listener \"a\" {\n  address = \"127.0.0.1:0\"\n}\n"), false)
	f.Add([]byte(`{"listener": {"a": {"address": "127.0.0.1:0"}}}`), true)
	f.Add([]byte("\xef\xbb\xbflistener \"\xff\" { address = \"${\"\n"), false)
	f.Fuzz(func(t *testing.T, src []byte, json bool) {
		if procFile(src) {
			// The loader reads the regular files a configuration names
			// (TLS files, token_file): /proc/kcore is one, of 128 TiB.
			// Devices are refused unread (TestControlTokenFileNotRegular).
			t.Skip()
		}
		name := "fuzz.hcl"
		if json {
			name = "fuzz.json"
		}
		defer time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("Parse hangs on %q (json %v)", src, json)) }).Stop()
		l := NewLoader()
		l.LookupEnv = func(string) (string, bool) { return "", false }
		cfg, diags := l.Parse(name, src)
		if cfg == nil && !diags.HasErrors() {
			t.Fatalf("no Config and no error: %v", diags)
		}
		if cfg != nil && diags.HasErrors() {
			t.Fatalf("a Config despite errors: %v", diags)
		}
		lines := lineStarts(src)
		for _, d := range diags {
			if d.Subject == nil {
				t.Errorf("diagnostic without a source range: %s", FormatDiagnostic(d))
				continue
			}
			checkRange(t, "Subject", d, *d.Subject, name, src, lines)
			if d.Context != nil {
				checkRange(t, "Context", d, *d.Context, name, src, lines)
			}
			if line := FormatDiagnostic(d); strings.ContainsAny(line, "\n\r") {
				t.Errorf("diagnostic line holds a line break: %q", line)
			}
		}
		var buf bytes.Buffer
		if err := l.WriteDiagnostics(&buf, diags, 80, false); err != nil {
			t.Fatal(err)
		}
	})
}

// procFile reports whether src may name a file under /proc or /sys.
func procFile(src []byte) bool {
	for _, p := range []string{"/proc", "/sys"} {
		if bytes.Contains(src, []byte(p)) {
			return true
		}
	}
	return false
}

// lineStarts returns the byte offset at which each line of src starts.
func lineStarts(src []byte) []int {
	starts := []int{0}
	for i, c := range src {
		if c == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// checkRange fails t unless r lies in src (named name): ordered byte
// offsets within it, and for each end the line holding that offset and a
// column no further than the bytes before it on that line allow (hcl counts
// columns in grapheme clusters, so a column may be less than the bytes).
func checkRange(t *testing.T, what string, d *hcl2.Diagnostic, r hcl2.Range, name string, src []byte, lines []int) {
	t.Helper()
	if r.Filename != name {
		t.Errorf("%s of %q names file %q, not %q", what, d.Summary, r.Filename, name)
		return
	}
	if r.Start.Byte < 0 || r.End.Byte > len(src) || r.Start.Byte > r.End.Byte {
		t.Errorf("%s of %q: bytes %d..%d outside the %d-byte input", what, d.Summary, r.Start.Byte, r.End.Byte, len(src))
		return
	}
	for _, p := range []hcl2.Pos{r.Start, r.End} {
		if p.Line < 1 || p.Line > len(lines) {
			t.Errorf("%s of %q: line %d outside 1..%d", what, d.Summary, p.Line, len(lines))
			continue
		}
		start := lines[p.Line-1]
		next := len(src) + 1
		if p.Line < len(lines) {
			next = lines[p.Line]
		}
		if p.Byte < start || p.Byte >= next {
			t.Errorf("%s of %q: byte %d is not on line %d (bytes %d..%d)", what, d.Summary, p.Byte, p.Line, start, next-1)
			continue
		}
		if max := p.Byte - start + 1; p.Column < 1 || p.Column > max {
			t.Errorf("%s of %q: column %d at byte %d of line %d (at most %d)", what, d.Summary, p.Column, p.Byte, p.Line, max)
		}
		if utf8.Valid(src) && p.Byte < len(src) && !utf8.RuneStart(src[p.Byte]) {
			t.Errorf("%s of %q: byte %d is inside a UTF-8 sequence", what, d.Summary, p.Byte)
		}
	}
}

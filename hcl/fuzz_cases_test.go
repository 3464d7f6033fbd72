package hcl

import (
	"strings"
	"testing"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// TestControlTokenFileNotRegular: a token_file that is not a regular file
// (a device, a FIFO) is refused without being read; reading /dev/zero would
// never end and a FIFO would block `impulse-agent validate` (found while
// writing FuzzParse: the TLS files were checked before reading, the token
// file was read anyway).
func TestControlTokenFileNotRegular(t *testing.T) {
	done := make(chan hcl2.Diagnostics, 1)
	go func() {
		_, diags := Parse("c.hcl", []byte("control {\n  address = \"127.0.0.1:9901\"\n  token_file = \"/dev/zero\"\n}\n"))
		done <- diags
	}()
	select {
	case diags := <-done:
		if got := linesOf(diags); !strings.Contains(got, "c.hcl:3:16: Not a regular file") {
			t.Errorf("diagnostics:\n%s\nwant c.hcl:3:16: Not a regular file", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Parse still reading /dev/zero after 10 s")
	}
}

// TestDiagnosticRangesInsideInput: the JSON inputs FuzzParse found with
// ranges outside the input or not where their offsets are get ranges
// inside it (hcl's JSON parser; clampRanges).
func TestDiagnosticRangesInsideInput(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`"`, "x.json:1:2: Invalid JSON string"},
		{"\"\n", "x.json:1:2: Invalid JSON string"},
		{"≤", "x.json:1:1: Invalid start of value"},
	} {
		_, diags := Parse("x.json", []byte(c.src))
		for _, d := range diags {
			if !rangeIn(*d.Subject, []byte(c.src)) || d.Context != nil && !rangeIn(*d.Context, []byte(c.src)) {
				t.Errorf("%q: %s: range %v (context %v) outside the input", c.src, d.Summary, d.Subject, d.Context)
			}
		}
		if got := linesOf(diags); !strings.Contains(got, c.want) {
			t.Errorf("%q: diagnostics\n%s\nwant %s", c.src, got, c.want)
		}
	}
}

package hcl

import (
	"regexp"
	"strings"
	"testing"
)

// TestDogstatsdAddressResolved: a dogstatsd_address whose host does not
// resolve is an error at its value (as the agent's start would fail); a
// name that resolves and an IP address load.
func TestDogstatsdAddressResolved(t *testing.T) {
	for _, tc := range []struct{ addr, err string }{
		{"127.0.0.1:8125", ""},
		{"localhost:8125", ""},
		{"dogstatsd.invalid:8125", `^dogstatsd\.hcl:3:23: Cannot reach DogStatsD address: telemetry dogstatsd_address: .*dogstatsd\.invalid.*\.$`},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			src := "\ntelemetry {\n  dogstatsd_address = \"" + tc.addr + "\"\n}\n" + tracingBase
			cfg, diags := Parse("dogstatsd.hcl", []byte(src))
			if tc.err == "" {
				if diags.HasErrors() {
					t.Fatal(linesOf(diags))
				}
				if cfg.Telemetry.DogstatsdAddress != tc.addr {
					t.Errorf("dogstatsd_address = %q", cfg.Telemetry.DogstatsdAddress)
				}
				return
			}
			lines := strings.Split(strings.TrimSpace(linesOf(diags)), "\n")
			if len(lines) != 1 || !regexp.MustCompile(tc.err).MatchString(lines[0]) {
				t.Errorf("diagnostics\n  %s\nwant one matching %s", strings.Join(lines, "\n  "), tc.err)
			}
		})
	}
}

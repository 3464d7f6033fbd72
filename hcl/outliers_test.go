package hcl

import (
	"strings"
	"testing"
	"time"
)

// TestOutlierDetectionIsOnByDefault: an upstream without the block gets
// the defaults (issue 22: safe with nothing written), `enabled = false`
// turns it off, and a written block wins value by value.
func TestOutlierDetectionIsOnByDefault(t *testing.T) {
	def := OutlierDetection{Enabled: true, ConsecutiveFailures: 5, BaseEjectionTime: 10 * time.Second, MaxEjectionPercent: 100}
	with := func(block string) *Upstream {
		src := strings.Replace(testUpstream, "  route {}\n", "  route {}\n"+block, 1)
		return &mustParse(t, testListener+src).Upstreams[0]
	}
	if got := with("").Outliers(); got == nil || *got != def {
		t.Errorf("no block: %+v, want the defaults %+v", got, def)
	}
	if got := with("  outlier_detection {\n    enabled = false\n  }\n").Outliers(); got != nil {
		t.Errorf("enabled = false: %+v, want off", got)
	}
	got := with("  outlier_detection {\n    consecutive_failures = 3\n  }\n").Outliers()
	if want := (OutlierDetection{Enabled: true, ConsecutiveFailures: 3, BaseEjectionTime: 10 * time.Second, MaxEjectionPercent: 100}); got == nil || *got != want {
		t.Errorf("consecutive_failures = 3: %+v, want %+v", got, want)
	}
	if msg := parseErrors(t, testListener+strings.Replace(testUpstream, "  route {}\n", "  route {}\n  outlier_detection {\n    enabled = 1\n  }\n", 1)); !strings.Contains(msg, "enabled") {
		t.Errorf("enabled = 1: %s", msg)
	}
}

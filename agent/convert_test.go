package agent

import (
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/hcl"
)

// TestDiscoveryConfigResyncGrace: consul.resync_grace = "0s" turns the hold
// off, which discovery spells as a negative duration (its zero means the
// default).
func TestDiscoveryConfigResyncGrace(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{10 * time.Second, 10 * time.Second},
		{time.Minute, time.Minute},
		{0, -1},
	} {
		if got := discoveryConfig(&hcl.Consul{ResyncGrace: tc.in}).ResyncGrace; got != tc.want {
			t.Errorf("resync_grace %s → %s, want %s", tc.in, got, tc.want)
		}
	}
}

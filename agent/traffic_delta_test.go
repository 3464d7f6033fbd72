package agent

import (
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// TestDeltaSkipsIdleUpstreams: a bucket holds only the upstreams that
// answered in it (5,000 idle upstreams × 120 buckets held 70 MB), and a
// counter that went backwards (a reset) counts from 0.
func TestDeltaSkipsIdleUpstreams(t *testing.T) {
	prev := map[string]upstream.ResponseCounts{"idle": {Success: 7}, "busy": {Success: 3}, "reset": {Success: 9}}
	cur := map[string]upstream.ResponseCounts{"idle": {Success: 7}, "busy": {Success: 5, Errors: 1}, "reset": {Success: 2}, "new": {}}
	got := delta(cur, prev)
	want := map[string]upstream.ResponseCounts{"busy": {Success: 2, Errors: 1}, "reset": {Success: 2}}
	if len(got) != len(want) || got["busy"] != want["busy"] || got["reset"] != want["reset"] {
		t.Fatalf("delta = %+v, want %+v", got, want)
	}
}

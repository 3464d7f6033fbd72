package agent

import (
	"fmt"
	"slices"
	"testing"

	"github.com/impulse-agent/impulse-agent/hcl"
)

// TestUpstreamNamesDiff: the "catalog upstreams applied" line names what
// changed, at most logNamesMax names a side, not every catalog upstream.
func TestUpstreamNamesDiff(t *testing.T) {
	ups := func(names ...string) []hcl.Upstream {
		out := make([]hcl.Upstream, len(names))
		for i, n := range names {
			out[i].Name = n
		}
		return out
	}
	added, removed := upstreamNamesDiff(ups("consul:a", "consul:b"), ups("consul:b", "consul:c"))
	if !slices.Equal(added, []string{"consul:c"}) || !slices.Equal(removed, []string{"consul:a"}) {
		t.Fatalf("added %v removed %v", added, removed)
	}
	var many []string
	for i := range 5000 {
		many = append(many, fmt.Sprintf("consul:s%d", i))
	}
	added, removed = upstreamNamesDiff(nil, ups(many...))
	if len(added) != logNamesMax+1 || added[logNamesMax] != "(4980 more)" || len(removed) != 0 {
		t.Fatalf("5,000 new upstreams logged as %d names ending %q", len(added), added[len(added)-1])
	}
}

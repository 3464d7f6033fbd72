package soak

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// report is the soak's table: faults injected, requests served by kind,
// failures by kind and class (tolerated or not), and the resources.
func (w *world) report(col *collector, d time.Duration, base, after resources) string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %v of load and faults\n\n", d)
	fmt.Fprintf(&b, "| fault | injected |\n|---|---|\n")
	for _, k := range sortedKeys(w.faults) {
		fmt.Fprintf(&b, "| %s | %d |\n", k, w.faults[k])
	}
	failed := map[string]int{}
	tolerated := map[string]int{}
	classes := map[string]int{}
	for _, r := range col.failures {
		key := r.kind + "/" + r.proto
		if allowed(w, r) {
			tolerated[key]++
		} else {
			failed[key]++
		}
		classes[r.kind+": "+r.failure]++
	}
	keys := map[string]int{}
	for k := range col.ok {
		keys[k] = 0
	}
	for k := range failed {
		keys[k] = 0
	}
	for k := range tolerated {
		keys[k] = 0
	}
	fmt.Fprintf(&b, "\n| requests | served | tolerated failures | failures |\n|---|---|---|---|\n")
	total := [3]int{}
	for _, k := range sortedKeys(keys) {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |\n", k, col.ok[k], tolerated[k], failed[k])
		total[0] += col.ok[k]
		total[1] += tolerated[k]
		total[2] += failed[k]
	}
	fmt.Fprintf(&b, "| **all** | %d | %d | %d |\n", total[0], total[1], total[2])
	if len(classes) > 0 {
		fmt.Fprintf(&b, "\n| failure class | count |\n|---|---|\n")
		for _, k := range sortedKeys(classes) {
			fmt.Fprintf(&b, "| %s | %d |\n", k, classes[k])
		}
	}
	var lines []string
	for _, r := range col.failures {
		if r.kind != "stall" && len(lines) < 20 {
			lines = append(lines, fmt.Sprintf("- %s/%s %s %s (backend %q, %v)", r.kind, r.proto, r.failure, r.detail, r.backend, r.end.Sub(r.start).Round(time.Millisecond)))
		}
	}
	if len(lines) > 0 {
		fmt.Fprintf(&b, "\nfailures other than the stalling backend's (at most 20):\n%s\n", strings.Join(lines, "\n"))
	}
	fmt.Fprintf(&b, "\n| gateway at rest | before | after |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| live heap after GC (MiB) | %.1f | %.1f |\n", float64(base.heap)/(1<<20), float64(after.heap)/(1<<20))
	fmt.Fprintf(&b, "| open fds | %d | %d |\n| goroutines | %d | %d |\n| RSS after GC (MiB) | %.1f | %.1f |\n",
		base.fds, after.fds, base.goroutines, after.goroutines, float64(base.rss)/(1<<20), float64(after.rss)/(1<<20))
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

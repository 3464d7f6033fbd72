package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// procSample is the agent process at one moment.
type procSample struct {
	at  time.Time
	rss int64 // bytes: VmRSS of /proc/PID/status
	fds int   // entries of /proc/PID/fd
	// From the agent's Prometheus /metrics on the control API (the Go
	// collector): go_goroutines and go_memstats_heap_alloc_bytes; -1 when
	// it did not answer.
	goroutines int
	heapAlloc  int64
	gc         bool // a collection was forced first, so heapAlloc is the live heap
}

// sample reads the agent's RSS, descriptors, goroutines and heap. With gc it
// first forces a collection through the control API's
// /debug/pprof/heap?gc=1 (control.enable_debug is on in the benchmark's
// configuration), so that the heap figure is the live heap, not wherever
// the collector's cycle happened to be.
func (a *agentProc) sample(gc bool) procSample {
	s := procSample{at: time.Now(), goroutines: -1, heapAlloc: -1}
	if gc {
		if resp, err := a.ctl.Get(a.controlURL + "/debug/pprof/heap?gc=1"); err == nil {
			var out io.Writer = io.Discard
			if a.heapDir != "" {
				a.heapSeen++
				if f, err := os.Create(filepath.Join(a.heapDir, fmt.Sprintf("heap-%d.pb.gz", a.heapSeen))); err == nil {
					defer f.Close()
					out = f
				}
			}
			_, _ = io.Copy(out, resp.Body)
			resp.Body.Close()
			s.gc = resp.StatusCode == http.StatusOK
		}
	}
	s.rss = vmRSS(a.pid)
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", a.pid)); err == nil {
		s.fds = len(ents)
	}
	resp, err := a.ctl.Get(a.controlURL + "/metrics")
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "go_goroutines":
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				s.goroutines = int(v)
			}
		case "go_memstats_heap_alloc_bytes":
			if v, err := strconv.ParseFloat(value, 64); err == nil {
				s.heapAlloc = int64(v)
			}
		}
	}
	return s
}

// vmRSS returns the resident set of pid in bytes (VmRSS in
// /proc/PID/status), or -1.
func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "12345 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return -1
}

// mib formats bytes in MiB.
func mib(b int64) string {
	if b < 0 {
		return "?"
	}
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// growth compares one figure at the start and the end of a window against
// a noise margin: the figure is flat when it grew by at most the larger of
// abs and rel×start.
type growth struct {
	name       string
	start, end float64
	abs, rel   float64
	unit       func(float64) string
}

// Noise margins of "flat" (README, Performance): the figure at the end of
// the churn may exceed the one at its start by the larger of the absolute
// and the relative margin.
//   - goroutines: 16 or 5% (requests in flight, a timer or a connection's
//     reader and writer coming and going);
//   - open descriptors: 8 or 5% (connections to Consul or to backends
//     being replaced);
//   - live heap after a forced collection: 4 MiB or 10% (buffers and maps
//     sized by the last burst of work);
//   - RSS: 16 MiB, 20%, or twice the live heap at the start: the agent
//     runs with GOGC=200, so the runtime may keep up to three times the
//     live heap mapped until its scavenger or the agent's idle reclaimer
//     returns it; growth beyond that headroom is not the collector's.
func churnGrowth(a, b procSample) []growth {
	count := func(v float64) string { return thousands(int(v)) }
	bytes := func(v float64) string { return mib(int64(v)) }
	return []growth{
		{"goroutines", float64(a.goroutines), float64(b.goroutines), 16, 0.05, count},
		{"open descriptors", float64(a.fds), float64(b.fds), 8, 0.05, count},
		{"live heap (forced GC)", float64(a.heapAlloc), float64(b.heapAlloc), 4 << 20, 0.10, bytes},
		{"RSS", float64(a.rss), float64(b.rss), max(16<<20, 2*float64(a.heapAlloc)), 0.20, bytes},
	}
}

// known reports whether both samples had the figure.
func (g growth) known() bool { return g.start >= 0 && g.end >= 0 }

// flat reports whether the end is within the margin of the start.
func (g growth) flat() bool { return g.known() && g.end-g.start <= max(g.abs, g.rel*g.start) }

// String is "start → end (+x%; margin m)".
func (g growth) String() string {
	if !g.known() {
		return "not measured"
	}
	d := g.end - g.start
	return fmt.Sprintf("%s → %s (%+.1f%%; margin +%s)", g.unit(g.start), g.unit(g.end),
		100*d/max(g.start, 1), g.unit(max(g.abs, g.rel*g.start)))
}

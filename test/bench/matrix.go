package main

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"time"
)

// shape is one load shape of the matrix: a payload at one concurrency.
type shape struct {
	key      string // "small", "down", "up"
	proto    string // TCP section: "h2" or "h1" (over TLS, h2load); "" = HTTP/3
	payload  string
	path     string
	bodySize int64
	expect   int64
	conns    int
	streams  int
	// bulkMiB is the body size per request of the 1 MiB shapes (0 for the
	// small GET): their req/s and CPU/req derive from the bytes moved in the
	// window, so requests in progress at its ends count in part.
	bulkMiB float64
}

// rate returns the req/s and server CPU µs per request of one run of sh.
func (sh shape) rate(r Result) (rps, cpuPerReq float64) {
	if sh.bulkMiB == 0 {
		return r.ReqPerSec, r.CPUPerReqUS
	}
	reqs := r.MiB / sh.bulkMiB
	return r.MiBPerSec / sh.bulkMiB, ratio(r.ServerCPU*1e6, reqs)
}

// title names the shape in tables: "small GET (64 B), 1 conn × 50 streams".
func (s shape) title() string {
	switch s.proto {
	case "h2":
		return fmt.Sprintf("HTTP/2 over TLS, %s, %s", s.payload, s.concurrency())
	case "h1":
		return fmt.Sprintf("HTTP/1.1 over TLS, %s, %s", s.payload, s.concurrency())
	}
	return fmt.Sprintf("%s, %s", s.payload, s.concurrency())
}

// short names the shape in the targets table: "small 1×50", "h2 50×1".
func (s shape) short() string {
	name := s.key
	if s.proto != "" {
		name = s.proto
	}
	return fmt.Sprintf("%s %d×%d", name, s.conns, s.streams)
}

func (s shape) concurrency() string {
	plural := func(n int, one string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, one)
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	return plural(s.conns, "conn") + " × " + plural(s.streams, "stream")
}

// matrixShapes are the shapes of issue 5: three payloads, each over one
// connection with 50 streams and over 50 connections with one stream.
func matrixShapes() []shape {
	payloads := []shape{
		{key: "small", payload: "small GET (64 B)", path: "/small", expect: smallSize},
		{key: "down", payload: "1 MiB download", path: "/1m", expect: oneMiB, bulkMiB: 1},
		{key: "up", payload: "1 MiB upload", path: "/upload", bodySize: oneMiB, expect: -1, bulkMiB: 1},
	}
	var out []shape
	for _, p := range payloads {
		for _, c := range [][2]int{{1, 50}, {50, 1}} {
			p.conns, p.streams = c[0], c[1]
			out = append(out, p)
		}
	}
	return out
}

// summary holds the medians of a target's runs for one shape.
type summary struct {
	runs                     int
	rps, p50, p99, cpuPerReq float64
	srvUtil, cliUtil         float64
	errors                   int64
	errKinds                 map[string]int64
	errSample                map[string]string
}

// summarize computes the medians of the runs rs of sh (NaN fields when rs
// is empty).
func summarize(sh shape, rs []Result) summary {
	s := summary{runs: len(rs), errKinds: map[string]int64{}, errSample: map[string]string{}}
	med := func(f func(Result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		return Median(xs)
	}
	s.rps = med(func(r Result) float64 { rps, _ := sh.rate(r); return rps })
	s.p50 = med(func(r Result) float64 { return r.Latency.P50 })
	s.p99 = med(func(r Result) float64 { return r.Latency.P99 })
	s.cpuPerReq = med(func(r Result) float64 { _, c := sh.rate(r); return c })
	s.srvUtil = med(func(r Result) float64 { return r.ServerUtil })
	s.cliUtil = med(func(r Result) float64 { return r.ClientUtil })
	for _, r := range rs {
		s.errors += r.ErrorCount
		for k, n := range r.Errors {
			s.errKinds[k] += n
			if _, ok := s.errSample[k]; !ok {
				s.errSample[k] = r.ErrorSamples[k]
			}
		}
	}
	return s
}

// shapeTable renders the medians of one shape, with ratios to the target
// base (the bare server; the TLS server in the TCP section), named baseName
// in the header.
func shapeTable(sh shape, order []string, sums map[string]summary, base, baseName string) *Table {
	t := &Table{
		Title: "── " + sh.title() + " ──",
		Header: []string{"target", "req/s", "p50", "p99", "CPU/req", "srv CPU", "cli CPU", "errors",
			"req/s ÷" + baseName, "CPU/req ÷" + baseName, "p99 ÷" + baseName},
	}
	bare, haveBare := sums[base]
	for _, k := range order {
		s, ok := sums[k]
		if !ok {
			continue
		}
		rr, cr, pr := math.NaN(), math.NaN(), math.NaN()
		if haveBare {
			rr, cr, pr = ratio(s.rps, bare.rps), ratio(s.cpuPerReq, bare.cpuPerReq), ratio(s.p99, bare.p99)
		}
		t.AddRow(targetLabels[k], fmtFloat(s.rps, 0), fmtMS(s.p50), fmtMS(s.p99),
			fmtFloat(s.cpuPerReq, 1)+" µs", fmtFloat(s.srvUtil*100, 0)+"%", fmtFloat(s.cliUtil*100, 0)+"%",
			fmt.Sprint(s.errors), fmtRatio(rr), fmtRatio(cr), fmtRatio(pr))
		for _, kind := range slices.Sorted(maps.Keys(s.errKinds)) {
			t.Notes = append(t.Notes, fmt.Sprintf("  %s: %d × %s, e.g. %s", targetLabels[k], s.errKinds[kind], kind, s.errSample[kind]))
		}
	}
	return t
}

// runMatrix measures every shape on every server, alternating: run r
// visits the servers in an order rotated by r. Each shape's table is printed
// as soon as it is complete.
func (e *env) runMatrix(servers []*server, o *harnessOpts, v *verdicts) {
	var order []string
	for _, s := range servers {
		order = append(order, s.Key)
	}
	fmt.Println("CPU/req: CPU time of the server under test (the proxy, not its backend) per completed request;")
	fmt.Println("srv/cli CPU: share of one core used by the server under test / the load generator (≈100% = saturated).")
	fmt.Println("1 MiB shapes: req/s and CPU/req count the body bytes moved in the window (÷ 1 MiB), so transfers")
	fmt.Printf("in progress at its ends count in part; their warm-up is %s. Latency is over completed requests.\n", o.warmupBulk)
	fmt.Println()
	all := servers
	for _, sh := range matrixShapes() {
		if !listHas(o.shapes, sh.key) {
			continue
		}
		// The extra rows (the previous build, Debian's Caddy) are for the
		// small GETs only: they answer CPU questions and cost time.
		servers = nil
		for _, s := range all {
			if sh.key == "small" || (s.Key != keyAgentBase && s.Key != keyCaddyDeb) {
				servers = append(servers, s)
			}
		}
		results := map[string][]Result{}
		for r := range o.runs {
			for i := range servers {
				s := servers[(i+r)%len(servers)]
				warmup := o.warmup
				if sh.bulkMiB > 0 {
					warmup = o.warmupBulk
				}
				res, err := e.load(s, loadArgs{path: sh.path, proto: s.Proto, conns: sh.conns, streams: sh.streams,
					duration: o.duration, warmup: warmup, bodySize: sh.bodySize, expect: sh.expect, timeout: 30 * time.Second})
				if err != nil {
					fmt.Fprintf(os.Stderr, "bench: %s / %s run %d: %v\n", sh.title(), s.Key, r+1, err)
					continue
				}
				results[s.Key] = append(results[s.Key], res)
				rps, cpu := sh.rate(res)
				fmt.Fprintf(os.Stderr, "  %-34s run %d/%d  %-24s %8.0f req/s  p99 %9s  %7.1f µs CPU/req  %d errors\n",
					sh.title(), r+1, o.runs, targetLabels[s.Key], rps, fmtMS(res.Latency.P99), cpu, res.ErrorCount)
			}
		}
		sums := map[string]summary{}
		for k, rs := range results {
			sums[k] = summarize(sh, rs)
		}
		fmt.Print(shapeTable(sh, order, sums, keyBare, "bare").String())
		fmt.Println()
		v.matrix(sh, sums)
	}
}

// verdict is one row of the targets table.
type verdict struct{ goal, shape, measured, bound, result string }

// verdicts collects how impulse-agent stands against the targets of the
// issue.
type verdicts struct {
	noise float64
	rows  []verdict
}

// add judges value against bound (see Verdict).
func (v *verdicts) add(goal, shape string, value, bound float64, atMost bool, format func(float64) string) {
	op := "≥ "
	if atMost {
		op = "≤ "
	}
	v.rows = append(v.rows, verdict{goal, shape, format(value), op + format(bound), Verdict(value, bound, atMost, v.noise)})
}

// matrix records the targets that one shape's medians decide.
func (v *verdicts) matrix(sh shape, sums map[string]summary) {
	bare, okBare := sums[keyBare]
	h1, okH1 := sums[keyAgentH1]
	h2, okH2 := sums[keyAgentH2]
	caddy, okCaddy := sums[keyCaddy]
	short := sh.short()
	if sh.key == "small" && okBare {
		if okH1 {
			v.add("CPU/req agent→h1 ÷ bare", short, ratio(h1.cpuPerReq, bare.cpuPerReq), 2.0, true, fmtRatio)
		}
		if okH2 {
			v.add("CPU/req agent→h2 ÷ bare", short, ratio(h2.cpuPerReq, bare.cpuPerReq), 2.5, true, fmtRatio)
		}
	}
	// Issue 10: the HTTP/3 small GET costs no more CPU than in the
	// previous build, measured in the same run.
	if base, ok := sums[keyAgentBase]; ok && okH1 && sh.key == "small" {
		v.add("CPU/req agent→h1 ÷ previous build", short, ratio(h1.cpuPerReq, base.cpuPerReq), 1.0, true, fmtRatio)
	}
	if okH1 && okCaddy {
		v.add("req/s agent→h1 ÷ Caddy", short, ratio(h1.rps, caddy.rps), 2.0, false, fmtRatio)
		// The bare server is the ceiling of every proxy on this rig: when
		// twice Caddy's req/s is beyond it, no proxy could meet the goal.
		if last := &v.rows[len(v.rows)-1]; okBare && last.result != "met" && 2*caddy.rps > bare.rps {
			last.result = fmt.Sprintf("unreachable: 2× Caddy = %s bare", fmtRatio(ratio(2*caddy.rps, bare.rps)))
		}
		v.add("p99 agent→h1 ÷ Caddy", short, ratio(h1.p99, caddy.p99), 1.0, true, fmtRatio)
	}
}

// table renders the verdicts.
func (v *verdicts) table() *Table {
	t := &Table{
		Title:  "── impulse-agent against the targets of issues 5 and 10 (medians; ≈ = within the noise band) ──",
		Header: []string{"target", "shape", "measured", "goal", "verdict"},
	}
	for _, r := range v.rows {
		t.AddRow(r.goal, r.shape, r.measured, r.bound, r.result)
	}
	if len(v.rows) == 0 {
		t.Notes = append(t.Notes, "  (no target could be evaluated)")
	}
	t.Notes = append(t.Notes, "  absolute req/s are not results (shared machine); only the ratios measured in this run are.")
	return t
}

// rotate returns xs rotated left by r.
func rotate[T any](xs []T, r int) []T {
	if len(xs) == 0 {
		return nil
	}
	r %= len(xs)
	return append(slices.Clone(xs[r:]), xs[:r]...)
}

package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// perfLine is one row of `perf report --stdio -g none --sort sym`.
type perfLine struct {
	children, self float64 // percent; children == self without --children
	kernel         bool
	sym            string
}

// parsePerfReport parses the rows of `perf report --stdio -g none --sort
// sym`, with or without --children: "  12.34%  [.] sym" or
// "  34.46%  0.13%  [.] sym". Comments and other lines are skipped.
func parsePerfReport(out string) []perfLine {
	var rows []perfLine
	for l := range strings.Lines(out) {
		f := strings.Fields(l)
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		var pcts []float64
		i := 0
		for ; i < len(f) && strings.HasSuffix(f[i], "%"); i++ {
			x, err := strconv.ParseFloat(strings.TrimSuffix(f[i], "%"), 64)
			if err != nil {
				break
			}
			pcts = append(pcts, x)
		}
		if len(pcts) == 0 || len(pcts) > 2 || i+1 >= len(f) || (f[i] != "[.]" && f[i] != "[k]") {
			continue
		}
		r := perfLine{children: pcts[0], self: pcts[len(pcts)-1], kernel: f[i] == "[k]", sym: strings.Join(f[i+1:], " ")}
		rows = append(rows, r)
	}
	return rows
}

// perfFrames are the frames whose inclusive share of the agent's CPU the
// profile reports, outermost first; they nest, so shares overlap.
var perfFrames = []struct{ label, sym string }{
	{"HTTP/3 request handler goroutine (all of a request)", "github.com/quic-go/quic-go/http3.(*RawServerConn).handleRequestStream"},
	{"  http3: parse request headers (QPACK)", "github.com/quic-go/quic-go/http3.requestFromHeaders"},
	{"  gateway.serve (route, pick, forward, copy back)", "github.com/impulse-agent/impulse-agent/gateway.(*Gateway).serve"},
	{"    gateway.outgoing (clone request, X-Forwarded-*)", "github.com/impulse-agent/impulse-agent/gateway.outgoing"},
	{"    net/http Transport.roundTrip (to the backend)", "net/http.(*Transport).roundTrip"},
	{"    gateway.copyResponse (headers, body, flush)", "github.com/impulse-agent/impulse-agent/gateway.copyResponse"},
	{"    request counter and duration histogram", "github.com/impulse-agent/impulse-agent/gateway.(*gatewayMetrics).request"},
	{"  http3: finish the response (HEADERS/DATA frames)", "github.com/quic-go/quic-go/http3.(*responseWriter).Finish"},
	{"backend HTTP/1.1 connection writer (TCP send)", "net/http.(*persistConn).writeLoop"},
	{"backend HTTP/1.1 connection reader (TCP receive, parse)", "net/http.(*persistConn).readLoop"},
	{"backend HTTP/2 connection reader", "golang.org/x/net/http2.(*clientConnReadLoop).run"},
	{"quic-go connection loop (packets, ACKs, packet crypto)", "github.com/quic-go/quic-go.(*Conn).run"},
	{"UDP sendmsg", "syscall.sendmsg"},
	{"UDP recvmsg", "syscall.recvmsg"},
	{"allocation (runtime.mallocgc)", "runtime.mallocgc"},
	{"GC assists", "runtime.gcAssistAlloc"},
	{"GC background mark workers", "runtime.gcBgMarkWorker"},
	{"goroutine stack growth (runtime.newstack)", "runtime.newstack"},
	{"Go scheduler (runtime.schedule)", "runtime.schedule"},
}

// perfSummary renders the inclusive shares of perfFrames and the hottest
// self symbols.
func perfSummary(children, self []perfLine, top int) string {
	inc := map[string]float64{}
	for _, r := range children {
		inc[r.sym] = r.children
	}
	t := &Table{Header: []string{"frame (inclusive, nested)", "CPU %"}}
	for _, f := range perfFrames {
		if x, ok := inc[f.sym]; ok {
			t.AddRow(f.label, fmtFloat(x, 1))
		}
	}
	s := &Table{Header: []string{"hottest symbols (self)", "CPU %"}}
	for i, r := range self {
		if i == top {
			break
		}
		name := r.sym
		if r.kernel {
			name = "[kernel] " + name
		}
		s.AddRow(name, fmtFloat(r.self, 1))
	}
	return t.String() + "\n" + s.String()
}

// runPerf profiles s (the agent) with perf while it serves small GETs
// (1 connection × 50 streams) and prints where its CPU goes.
func (e *env) runPerf(s *server, o *harnessOpts) {
	perf, err := exec.LookPath("perf")
	if err != nil || s == nil {
		fmt.Println("profile: skipped (needs perf and the agent → h1 target)")
		return
	}
	data := filepath.Join(e.dir, "perf.data")
	done := make(chan error, 1)
	go func() {
		_, err := e.load(s, loadArgs{path: "/small", proto: "h3", conns: 1, streams: 50, warmup: time.Second,
			duration: o.perf + time.Second, expect: smallSize, timeout: 30 * time.Second})
		done <- err
	}()
	time.Sleep(1500 * time.Millisecond)
	rec := exec.Command(perf, "record", "-F", "999", "-g", "-o", data, "-p", strconv.Itoa(s.PID()),
		"--", "sleep", fmt.Sprint(o.perf.Seconds()))
	if out, err := rec.CombinedOutput(); err != nil {
		fmt.Printf("profile: perf record failed: %v\n%s\n", err, out)
		<-done
		return
	}
	if err := <-done; err != nil {
		fmt.Printf("profile: load failed: %v\n", err)
	}
	report := func(args ...string) []perfLine {
		base := []string{"report", "-i", data, "--stdio", "-g", "none", "--sort", "sym", "--percent-limit", "0"}
		out, err := exec.Command(perf, append(base, args...)...).Output()
		if err != nil {
			fmt.Printf("profile: perf report: %v\n", err)
		}
		return parsePerfReport(string(out))
	}
	where := "run with -keep to keep perf.data"
	if o.keep {
		where = "perf.data: " + data
	}
	fmt.Printf("── perf profile of impulse-agent → h1 under small GET, 1 conn × 50 streams, %s at 999 Hz (%s) ──\n", o.perf, where)
	fmt.Print(perfSummary(report("--children"), report("--no-children"), 25))
	fmt.Println()
}

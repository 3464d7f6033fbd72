package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// loadavg returns the 1-minute load average from /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// pct returns the nearest-rank percentile q (0..100) of sorted d.
func pct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(q/100*float64(len(d))+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func dist(d []time.Duration) string {
	if len(d) == 0 {
		return "n=0"
	}
	slices.Sort(d)
	return fmt.Sprintf("p50 %s  p90 %s  p99 %s  max %s  (n=%d)", ms(pct(d, 50)), ms(pct(d, 90)), ms(pct(d, 99)), ms(d[len(d)-1]), len(d))
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

// pctCore is CPU seconds over a window as a percentage of one core.
func pctCore(cpu float64, window time.Duration) float64 {
	return 100 * cpu / max(window.Seconds(), 1e-9)
}

// report prints the details of every phase that ran, then the summary
// table (table.go).
func (r *result) report(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	o, n := r.o, r.o.services
	limit := "stock limits (http_max_conns_per_client 200)"
	if o.consulMaxConns > 0 {
		limit = fmt.Sprintf("limits.http_max_conns_per_client = %d", o.consulMaxConns)
	}
	p("impulse-agent Consul scale benchmark (B06), agent built from %s", r.build)
	layout := fmt.Sprintf("%d TTL checks on one Consul v1.14 dev node", n*o.instances)
	if o.nodes > 1 {
		layout = fmt.Sprintf("%d checks on %d catalog nodes of one Consul v1.14 dev agent", n*o.instances, o.nodes)
	}
	p("  %d services × %d instances (%s, %s), consul.wait %s, %d CPUs, %s",
		n, o.instances, layout, limit, o.wait, runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH)
	p("  load average at start / end: %s / %s (the CPUs are shared with whatever else runs)", r.loadStart, loadavg())
	base := "not measured (-baseline 0)"
	if o.baseline > 0 {
		base = fmt.Sprintf("%.2f s over %s (%.1f%% of one core)", r.baselineConsulCPU, o.baseline, pctCore(r.baselineConsulCPU, o.baseline))
	}
	p("  Consul start → every instance passing in the catalog %s (registered by its configuration); Consul CPU without the agent %s",
		r.regTook.Round(time.Millisecond), base)
	r.reportStartup(p)
	if r.ready {
		r.reportIdle(p)
		r.reportWindows(p)
		r.reportChurn(p)
	}
	p("")
	p("connections from the agent to Consul (counting proxy, http.Server.ConnState), and replies by status, per phase")
	for _, ph := range r.phases {
		p("  %-26s most open at once %5d, opened %5d, open at its end %5d; replies %s", ph.name, ph.maxOpen, ph.opened, ph.openAtEnd, statusText(ph.statuses))
	}
	p("  replies by status over the run: %s (%s requests, %s from Consul)", statusText(r.all.statuses), thousands(r.all.total), mib(r.all.bytes))
	p("  (429: Consul's connection limit or rate limit; 502: the proxy's own answer when Consul refused or dropped the connection; blocked: no reply yet at the end)")
	p("  connections to Consul answered before their request was sent (its connection limit's 429 on connect): %s", thousands(r.refusedEarly))
	p("")
	r.table(w)
	p("")
	p("reproduce: go run ./test/scale %s   (total %s)", r.o.args, r.total.Round(time.Second))
}

func (r *result) reportStartup(p func(string, ...any)) {
	s := r.startupReqs
	p("")
	if !r.ready {
		p("startup: %s", r.notReady)
	} else {
		p("startup: /v1/ready after %s, every upstream complete after %s; agent CPU %.2f s",
			r.readyIn.Round(time.Millisecond), r.completeIn.Round(time.Millisecond), r.startupCPU)
	}
	p("  cold-start requests       %s in %s: mean %.0f/s, busiest 1 s %s", thousands(r.cold.n), r.cold.span.Round(time.Millisecond),
		r.cold.mean(), thousands(r.cold.busiest))
	settle := "not waited for"
	switch {
	case r.settleErr != nil:
		settle = r.settleErr.Error()
	case r.ready:
		settle = fmt.Sprintf("settled %s later", r.settleTook.Round(time.Millisecond))
	}
	p("  requests until settled    %s (%d with index=; %s); replies %s; %s from Consul",
		thousands(s.total), s.withIndex, settle, statusText(s.statuses), mib(s.bytes))
	p("  agent RSS                 %s at start, %s after startup; %d goroutines, %d descriptors after startup",
		mib(r.atStart.rss), mib(r.atReady.rss), r.atReady.goroutines, r.atReady.fds)
}

func (r *result) reportIdle(p func(string, ...any)) {
	o := r.o
	if o.idle <= 0 {
		return
	}
	ir := r.idleReqs
	periods := float64(o.idle) / float64(o.wait)
	perSvc := float64(ir.total) / float64(o.services)
	p("")
	p("idle window %s (%.2f wait periods)", o.idle, periods)
	p("  requests to Consul        %d = %.2f per service in the window = %.2f per service per wait period; %s from Consul",
		ir.total, perSvc, perSvc/periods, mib(ir.bytes))
	p("    sent after              %d wait expiries, %d changes, %d failures; %d first requests; %d with index=",
		ir.afterExpiry, ir.afterChange, ir.afterFailure, ir.first, ir.withIndex)
	p("  agent CPU                 %.2f s (%.2f%% of one core)", r.idleCPU, pctCore(r.idleCPU, o.idle))
	p("  Consul CPU                %.2f s (%.2f%% of one core)", r.idleConsulCPU, pctCore(r.idleConsulCPU, o.idle))
}

func (r *result) reportWindows(p func(string, ...any)) {
	o := r.o
	idleRate := 0.0
	if o.idle > 0 {
		idleRate = r.idleCPU / o.idle.Seconds()
	}
	if q := r.quiet; q != nil {
		p("")
		p("flip window without probes %s: %d flips", q.flipping.Round(time.Millisecond), len(q.flips))
		windowReport(p, o, q)
		net := max(0, q.cpu-idleRate*q.window.Seconds())
		p("  agent CPU                 %.2f s over %s (%.1f%% of one core); minus the idle rate: %.2f s = %.1f ms per change",
			q.cpu, q.window.Round(time.Millisecond), pctCore(q.cpu, q.window), net, 1000*net/float64(max(1, len(q.flips))))
		p("  Consul CPU                %.2f s", q.consulCPU)
	}
	pr := r.probed
	c := convergence(pr)
	p("")
	p("flip window with convergence probes %s: %d flips (%d ticks skipped: every service busy)",
		pr.flipping.Round(time.Millisecond), len(pr.flips), pr.skipped)
	windowReport(p, o, pr)
	p("  convergence               %s   (check API call returned → routing changed)", dist(c.all))
	p("    removals                %s", dist(c.removes))
	p("    additions               %s", dist(c.adds))
	p("    from the call's start   %s", dist(c.fromStart))
	p("    Consul part             %s   (API call sent → first reply carrying the change: a status answer of the change feed, or the service's re-read)", dist(c.consulPart))
	p("    agent part              %s   (that reply → routing changed; includes the 20 ms coalescing)", dist(c.agentPart))
	p("    not converged in 10 s   %d", c.notConverged)
	p("  check API call            %s", dist(c.api))
	p("  measurement               probe every %s, probe RTT %s; error +0..(interval + RTT); %d probe requests, %d errors",
		o.probeInterval, dist(c.rtts), c.probes, c.probeErrs)
	probes := "probes not calibrated (-calibrate 0)"
	if len(r.calRTT) > 0 {
		probes = fmt.Sprintf("of which probes ≈ %d × %.0f µs = %.2f s", c.probes, r.calCPUPerReq*1e6, r.calCPUPerReq*float64(c.probes))
	}
	p("  agent CPU                 %.2f s over %s (%.1f%% of one core), %s",
		pr.cpu, pr.window.Round(time.Millisecond), pctCore(pr.cpu, pr.window), probes)
	p("  Consul CPU                %.2f s", pr.consulCPU)
	if len(r.calRTT) > 0 {
		p("  calibration               %d probe requests: %.0f µs agent CPU each, RTT %s", len(r.calRTT), r.calCPUPerReq*1e6, dist(r.calRTT))
	}
	if r.final != nil {
		p("")
		printRouting(p, "routing after the flips", *r.final)
	}
}

func (r *result) reportChurn(p func(string, ...any)) {
	c := r.churn
	if c == nil {
		return
	}
	p("")
	p("churn %s: %d watched services deregistered, %d registered again; %d unwatched services added, %d removed; %d check flips",
		c.dur.Round(time.Millisecond), c.removed, c.restored, c.extraAdded, c.extraRemoved, c.flips)
	p("  rates                     %s; the Consul API calls are made one at a time, so a slow Consul lowers them", c.rates(r.o))
	p("  at the end                %d watched services deregistered, %d unwatched registered (at most %d of each)", c.absentEnd, c.extrasEnd, c.slack)
	changes := c.removed + c.restored + c.extraAdded + c.extraRemoved + c.flips
	p("  requests to Consul        %s = %.2f per change (%d re-issued after a wait expiry and %d periodic sweep reads not counted); replies %s; %s from Consul",
		thousands(c.reqs.total), c.reqs.perChange(changes), c.reqs.afterExpiry, c.reqs.periodicSweep, statusText(c.reqs.statuses), mib(c.reqs.bytes))
	if c.settleErr != nil {
		p("  after the churn           %v", c.settleErr)
	}
	gc := "forced GC before each sample"
	if !c.start.gc || !c.end.gc {
		gc = "the forced GC FAILED (/debug/pprof/heap?gc=1): the heap figures are not the live heap"
	}
	p("  agent, start → end (%s; flat: growth within the margin)", gc)
	for _, g := range churnGrowth(c.start, c.end) {
		p("    %-23s %s  %s", g.name, g, verdict(g.flat()))
	}
	printRouting(p, "routing after the churn", c.final)
}

// printRouting prints a routing comparison and its first mismatches.
func printRouting(p func(string, ...any), what string, rc routingCheck) {
	if len(rc.mismatches) == 0 {
		p("%s equals Consul's: yes (%d/%d upstreams, equal after %s)", what, rc.upstreams, rc.upstreams, rc.took.Round(time.Millisecond))
		return
	}
	p("%s equals Consul's: NO after %s, %d upstreams differ:", what, rc.took.Round(time.Millisecond), len(rc.mismatches))
	for _, m := range rc.mismatches[:min(20, len(rc.mismatches))] {
		p("  %s", m)
	}
}

// windowReport prints the Consul requests of one flip window.
func windowReport(p func(string, ...any), o options, wr *windowResult) {
	fr, changes := wr.reqs, len(wr.flips)
	p("  requests to Consul        %d in %s (flips, then until the routing followed and the requests settled); naive services × changes = %d",
		fr.total, wr.window.Round(time.Millisecond), o.services*changes)
	p("    per change              %.2f (every request but those re-issued after a wait expiry and the periodic sweep's, per flip)", fr.perChange(changes))
	p("    sent after a change     %d = %.2f per change (the reply to the previous request on its path carried a new index, or had no index=)",
		fr.afterChange, float64(fr.afterChange)/float64(max(1, changes)))
	p("    sent after wait expiry  %d (idle cost of per-service watches: services × window / wait ≈ %.0f)", fr.afterExpiry, float64(o.services)*wr.window.Seconds()/o.wait.Seconds())
	p("    other                   %d after a failure, %d first requests on their path", fr.afterFailure, fr.first)
	p("    replies                 %d changed, %d wait expired, %d failed, %d still blocked at the end; %d on /v1/health/service/, other paths %v",
		fr.changed, fr.expired, fr.failed, fr.total-fr.changed-fr.expired-fr.failed, fr.healthService, fr.other)
	p("    by status               %s; %s from Consul (%s per change)", statusText(fr.statuses), mib(fr.bytes), mib(fr.bytes/int64(max(1, changes))))
	p("  with index=               %d/%d (%.1f%%); requests without index= on a path already queried: %d",
		fr.withIndex, fr.total, 100*float64(fr.withIndex)/float64(max(1, fr.total)), fr.withoutIndexAfterFirst)
	p("  paths queried             %d (services: %d)", fr.watches, o.services)
	if wr.settleErr != nil {
		p("  at the end                %v", wr.settleErr)
	}
}

// convergenceStats are one probed window's distributions.
type convergenceStats struct {
	all, fromStart, consulPart, agentPart, adds, removes, api, rtts []time.Duration
	notConverged, probes, probeErrs                                 int
}

func convergence(w *windowResult) convergenceStats {
	var c convergenceStats
	for _, f := range w.flips {
		c.api = append(c.api, f.t1.Sub(f.t0))
		c.probes += f.probes
		c.probeErrs += f.errors
		c.rtts = append(c.rtts, f.rtts...)
		if f.converged.IsZero() {
			c.notConverged++
			continue
		}
		d := max(0, f.converged.Sub(f.t1))
		c.all = append(c.all, d)
		c.fromStart = append(c.fromStart, f.converged.Sub(f.t0))
		if f.toPassing {
			c.adds = append(c.adds, d)
		} else {
			c.removes = append(c.removes, d)
		}
		if !f.consulReply.IsZero() {
			c.consulPart = append(c.consulPart, f.consulReply.Sub(f.t0))
			c.agentPart = append(c.agentPart, max(0, f.converged.Sub(f.consulReply)))
		}
	}
	slices.Sort(c.all)
	return c
}

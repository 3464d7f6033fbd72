package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

type reportData struct {
	regTook, startupTook time.Duration
	startupReqs          requestSummary
	startupCPU           float64

	idleReqs               requestSummary
	idleCPU, idleConsulCPU float64

	calCPUPerReq float64
	calRTT       []time.Duration

	quiet, probed *windowResult // quiet is nil with -cpu-window=false

	mismatches []string
	total      time.Duration
	build      string
	loadStart  string
}

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

func report(o options, r reportData) {
	w := os.Stdout
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	n := o.services
	p("impulse-agent Consul scale benchmark (B06), agent built from %s", r.build)
	p("  %d services × %d instances (%d TTL checks on one Consul v1.14 dev node), consul.wait %s, %d CPUs, %s",
		n, o.instances, n*o.instances, o.wait, runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH)
	p("  load average at start / end: %s / %s (the CPUs are shared with whatever else runs)", r.loadStart, loadavg())
	p("  registration %s; agent start → every upstream complete %s, %d requests to Consul (%d with index=), agent CPU %.2f s",
		r.regTook.Round(time.Millisecond), r.startupTook.Round(time.Millisecond), r.startupReqs.total, r.startupReqs.withIndex, r.startupCPU)

	idleOK := true
	idleRate := 0.0 // agent CPU seconds per second when idle
	if o.idle > 0 {
		periods := float64(o.idle) / float64(o.wait)
		perSvc := float64(r.idleReqs.total) / float64(n)
		perPeriod := perSvc / periods
		idleOK = perPeriod <= 1.0
		idleRate = r.idleCPU / o.idle.Seconds()
		ir := r.idleReqs
		p("")
		p("idle window %s (%.2f wait periods)", o.idle, periods)
		p("  requests to Consul        %d = %.2f per service in the window = %.2f per service per wait period",
			ir.total, perSvc, perPeriod)
		p("    sent after              %d wait expiries, %d changes, %d failures; %d first requests; %d with index=",
			ir.afterExpiry, ir.afterChange, ir.afterFailure, ir.first, ir.withIndex)
		p("  agent CPU                 %.2f s (%.2f%% of one core)   consul CPU %.2f s", r.idleCPU, 100*idleRate, r.idleConsulCPU)
	}

	if q := r.quiet; q != nil {
		p("")
		p("flip window without probes %s: %d flips", q.flipping.Round(time.Millisecond), len(q.flips))
		windowReport(p, o, q)
		net := max(0, q.cpu-idleRate*q.window.Seconds())
		p("  agent CPU                 %.2f s over %s (%.1f%% of one core); minus the idle rate: %.2f s = %.1f ms per change",
			q.cpu, q.window.Round(time.Millisecond), 100*q.cpu/q.window.Seconds(), net, 1000*net/float64(max(1, len(q.flips))))
		p("  consul CPU                %.2f s", q.consulCPU)
	}

	pr := r.probed
	var conv, conv0, consulPart, agentPart, adds, removes, api, rtts []time.Duration
	notConverged, probes, probeErrs := 0, 0, 0
	for _, f := range pr.flips {
		api = append(api, f.t1.Sub(f.t0))
		probes += f.probes
		probeErrs += f.errors
		rtts = append(rtts, f.rtts...)
		if f.converged.IsZero() {
			notConverged++
			continue
		}
		c := max(0, f.converged.Sub(f.t1))
		conv = append(conv, c)
		conv0 = append(conv0, f.converged.Sub(f.t0))
		if f.toPassing {
			adds = append(adds, c)
		} else {
			removes = append(removes, c)
		}
		if !f.consulReply.IsZero() {
			consulPart = append(consulPart, f.consulReply.Sub(f.t0))
			agentPart = append(agentPart, max(0, f.converged.Sub(f.consulReply)))
		}
	}
	p("")
	p("flip window with convergence probes %s: %d flips (%d ticks skipped: every service busy)",
		pr.flipping.Round(time.Millisecond), len(pr.flips), pr.skipped)
	windowReport(p, o, pr)
	p("  convergence               %s   (check API call returned → routing changed)", dist(conv))
	p("    removals                %s", dist(removes))
	p("    additions               %s", dist(adds))
	p("    from the call's start   %s", dist(conv0))
	p("    Consul part             %s   (API call sent → changed blocking reply left the proxy)", dist(consulPart))
	p("    agent part              %s   (that reply → routing changed; includes the 20 ms coalescing)", dist(agentPart))
	p("    not converged in 10 s   %d", notConverged)
	p("  check API call            %s", dist(api))
	p("  measurement               probe every %s, probe RTT %s; error +0..(interval + RTT); %d probe requests, %d errors",
		o.probeInterval, dist(rtts), probes, probeErrs)
	probeCPU := r.calCPUPerReq * float64(probes)
	p("  agent CPU                 %.2f s over %s (%.1f%% of one core), of which probes ≈ %d × %.0f µs = %.2f s",
		pr.cpu, pr.window.Round(time.Millisecond), 100*pr.cpu/pr.window.Seconds(), probes, r.calCPUPerReq*1e6, probeCPU)
	p("  consul CPU                %.2f s", pr.consulCPU)
	if len(r.calRTT) > 0 {
		p("  calibration               %d probe requests: %.0f µs agent CPU each, RTT %s", len(r.calRTT), r.calCPUPerReq*1e6, dist(r.calRTT))
	}

	p("")
	if len(r.mismatches) == 0 {
		p("final routing equals Consul's final state: yes (%d/%d upstreams)", n, n)
	} else {
		p("final routing equals Consul's final state: NO, %d upstreams differ:", len(r.mismatches))
		for _, m := range r.mismatches[:min(20, len(r.mismatches))] {
			p("  %s", m)
		}
	}

	slices.Sort(conv)
	windows := []*windowResult{pr}
	if r.quiet != nil {
		windows = append(windows, r.quiet)
	}
	perChange, noIndex := 0.0, r.idleReqs.withoutIndexAfterFirst
	for _, wr := range windows {
		perChange = max(perChange, float64(wr.reqs.total-wr.reqs.afterExpiry)/float64(max(1, len(wr.flips))))
		noIndex += wr.reqs.withoutIndexAfterFirst
	}
	p("")
	p("targets")
	p("  %s requests grow with changes: %.2f per change not explained by wait expiry (≤ 2; naive %d per change)",
		verdict(perChange <= 2), perChange, n)
	p("  %s every request after a watch's first carries index=", verdict(noIndex == 0))
	p("  %s convergence p99 < 100 ms: %s", verdict(notConverged == 0 && len(conv) > 0 && pct(conv, 99) < 100*time.Millisecond), ms(pct(conv, 99)))
	if o.idle > 0 {
		p("  %s idle ≤ 1 request per service per wait period", verdict(idleOK))
	}
	p("  %s final routing equals Consul", verdict(len(r.mismatches) == 0))
	p("")
	p("reproduce: go run ./test/scale %s   (total %s)", strings.Join(os.Args[1:], " "), r.total.Round(time.Second))
}

// windowReport prints the Consul requests of one flip window.
func windowReport(p func(string, ...any), o options, wr *windowResult) {
	fr, changes := wr.reqs, len(wr.flips)
	p("  requests to Consul        %d in %s (flips + convergence + 200 ms); naive services × changes = %d",
		fr.total, wr.window.Round(time.Millisecond), o.services*changes)
	p("    sent after a change     %d = %.2f per change (the reply to the watch's previous request carried a new index)",
		fr.afterChange, float64(fr.afterChange)/float64(max(1, changes)))
	p("    sent after wait expiry  %d (idle cost: services × window / wait ≈ %.0f)", fr.afterExpiry, float64(o.services)*wr.window.Seconds()/o.wait.Seconds())
	p("    other                   %d after a failure, %d first requests", fr.afterFailure, fr.first)
	p("    replies                 %d changed, %d wait expired, %d failed, %d still blocked at the end; %d on /v1/health/service/, other paths %v",
		fr.changed, fr.expired, fr.failed, fr.total-fr.changed-fr.expired-fr.failed, fr.healthService, fr.other)
	p("  with index=               %d/%d (%.1f%%); requests without index= after a watch's first: %d",
		fr.withIndex, fr.total, 100*float64(fr.withIndex)/float64(max(1, fr.total)), fr.withoutIndexAfterFirst)
	p("  watches queried           %d of %d", fr.watches, o.services)
}

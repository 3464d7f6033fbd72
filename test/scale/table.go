package main

import (
	"fmt"
	"io"
	"runtime"
	"time"
)

// readyTarget is issue 26's time-to-ready target at 5,000 services; it is
// applied at every size.
const readyTarget = 30 * time.Second

// table prints the summary as a Markdown table (result, target, verdict),
// ready to paste into the README. Rows the run did not reach say so.
func (r *result) table(w io.Writer) {
	o := r.o
	row := func(what, value, target, v string) { fmt.Fprintf(w, "| %s | %s | %s | %s |\n", what, value, target, v) }
	judge := func(ok bool) string { return verdict(ok) }
	limit := "stock Consul limits"
	if o.consulMaxConns > 0 {
		limit = fmt.Sprintf("Consul http_max_conns_per_client %d", o.consulMaxConns)
	}
	nodes := "one node"
	if o.nodes > 1 {
		nodes = fmt.Sprintf("%d nodes", o.nodes)
	}
	fmt.Fprintf(w, "| %s services × %d instances on %s, wait %s, %s, %d CPUs | result | target | |\n",
		thousands(o.services), o.instances, nodes, o.wait, limit, runtime.NumCPU())
	fmt.Fprintln(w, "|---|---|---|---|")

	if r.ready {
		row("time to ready (agent start → /v1/ready 200)", fmt.Sprintf("%s (every upstream complete: %s)",
			secs(r.readyIn), secs(r.completeIn)), "< 30 s at 5,000", judge(r.readyIn < readyTarget))
	} else {
		row("time to ready (agent start → /v1/ready 200)", "not ready: "+r.notReady, "< 30 s at 5,000", "MISS")
	}
	row("max concurrent connections from the gateway to Consul", fmt.Sprintf("%d (%s)", r.maxConns(), r.connsByPhase()),
		fmt.Sprintf("≤ %d", maxConnsTarget), judge(r.maxConns() <= maxConnsTarget))
	row("Consul replies by status (whole run; 502: refused on connect)", statusText(r.all.statuses), "no 429", judge(r.all.statuses[429] == 0))
	row("cold start: requests to Consul per second", fmt.Sprintf("mean %.0f/s, busiest 1 s: %s (%s requests in %s)",
		r.cold.mean(), thousands(r.cold.busiest), thousands(r.cold.n), secs(r.cold.span)), "—", "")
	if !r.ready {
		row("gateway RSS at start / when giving up", fmt.Sprintf("%s / %s", mib(r.atStart.rss), mib(r.atReady.rss)), "—", "")
		return
	}

	if pc, ok := r.perChange(); ok {
		row("Consul requests per change", fmt.Sprintf("%.2f (%s)", pc, r.perChangeDetail()), fmt.Sprintf("≤ %d", perChangeTarget), judge(pc <= perChangeTarget))
	}
	c := convergence(r.probed)
	if len(c.all) > 0 {
		row("routing convergence p50 / p90 / p99 / max", fmt.Sprintf("%.1f / %.1f / %.1f / %.1f ms (%d flips, %d not converged)",
			msf(pct(c.all, 50)), msf(pct(c.all, 90)), msf(pct(c.all, 99)), msf(c.all[len(c.all)-1]), len(c.all), c.notConverged),
			"p99 < 100 ms", judge(c.notConverged == 0 && pct(c.all, 99) < 100*time.Millisecond))
	}
	if o.idle > 0 {
		consul := pctCore(r.idleConsulCPU, o.idle)
		base := ""
		if o.baseline > 0 {
			base = fmt.Sprintf("; %.1f%% before the gateway started", pctCore(r.baselineConsulCPU, o.baseline))
		}
		row("idle Consul agent CPU (% of one core)", fmt.Sprintf("%.1f%% over %s%s", consul, o.idle, base), "< 5%", judge(consul < 5))
		row("idle gateway CPU (% of one core)", fmt.Sprintf("%.1f%%", pctCore(r.idleCPU, o.idle)), "—", "")
	}
	row("gateway RSS at start / after startup / at end", fmt.Sprintf("%s / %s / %s", mib(r.atStart.rss), mib(r.atReady.rss), mib(r.atEnd.rss)), "—", "")
	if r.final != nil {
		row("final routing equals Consul's (after the flips)", routingText(*r.final), "equal", judge(len(r.final.mismatches) == 0))
	}
	if ch := r.churn; ch != nil {
		row(fmt.Sprintf("churn %s", ch.dur.Round(time.Second)), fmt.Sprintf("%d watched services removed, %d back; %d unwatched added, %d removed; %d flips (%s)",
			ch.removed, ch.restored, ch.extraAdded, ch.extraRemoved, ch.flips, ch.rates(o)), "—", "")
		for _, g := range churnGrowth(ch.start, ch.end) {
			row("churn: gateway "+g.name+", start → end", g.String(), "flat", judge(g.flat()))
		}
		row("final routing equals Consul's (after the churn)", routingText(ch.final), "equal", judge(len(ch.final.mismatches) == 0))
	}
}

// perChangeDetail names each flip window's figure.
func (r *result) perChangeDetail() string {
	s := ""
	for _, w := range []struct {
		name string
		wr   *windowResult
	}{{"without probes", r.quiet}, {"with probes", r.probed}} {
		if w.wr == nil {
			continue
		}
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s %.2f over %d flips", w.name, w.wr.reqs.perChange(len(w.wr.flips)), len(w.wr.flips))
	}
	return s
}

func routingText(rc routingCheck) string {
	if len(rc.mismatches) == 0 {
		return fmt.Sprintf("yes, %s/%s upstreams", thousands(rc.upstreams), thousands(rc.upstreams))
	}
	return fmt.Sprintf("NO, %d of %s upstreams differ", len(rc.mismatches), thousands(rc.upstreams))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Command scale is the Consul scale benchmark of impulse-agent (case B06): it
// runs the real agent binary against a real Consul dev agent with its stock
// limits and many services, flips health checks, churns services, and
// reports how the agent uses Consul (requests per change, concurrent
// connections, the cold-start request rate, replies by status), how fast
// routing follows Consul, Consul's and the agent's CPU, and the agent's
// memory, goroutines and descriptors.
//
//	go run ./test/scale                 # 5,000 services × 2 instances, wait 5m, 60 s of flips, 10 min of churn (~20 min)
//	go run ./test/scale -quick          # 1,000 services, wait 2s, 10 s idle, 3 s of flips, no churn (~1 min)
//	make bench-consul SCALE=1000        # the full run at 1,000 services (SCALE_FLAGS=-quick: the quick run)
//
// Between the agent and Consul sits a counting reverse proxy that records
// every request (path, index=, arrival and reply times, reply index, status,
// reply bytes) and every TCP connection the agent opens to it (current and
// maximum concurrently open, per phase). The phases are: startup, an idle
// window (the wait period and a margin by default), a probe calibration,
// the flip windows, a comparison of every upstream's backends with Consul's
// passing instances, then with -churn services added and deregistered while
// checks flip, and the comparison again.
//
// Convergence is measured per flip with HTTP/3 requests to the flipped
// service's host, paced by -probe-interval from the moment the Consul API
// call returns: an added instance has converged at the send time of the
// first request it answers, a removed one at the send time of the first of
// 2×(remaining+1) consecutive requests it does not answer (round-robin would
// have picked it), or of the first 503 when nothing remains. The error is
// +0..(probe interval + one request round trip). A service is not flipped
// again while its previous flip is still being measured.
//
// TestB06ScaleQuick (scale_test.go) runs the quick preset in `go test` and
// fails unless the agent becomes ready, holds at most 8 connections to
// Consul, sends at most 3 requests per change and ends with Consul's routing.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// options are the benchmark's parameters (flags, or the test's preset).
type options struct {
	services, instances int
	nodes               int // Consul nodes holding the instances (registry)
	duration, flip      time.Duration
	wait, idle          time.Duration
	baseline            time.Duration // Consul CPU before the agent starts
	readyTimeout        time.Duration
	churn, churnEvery   time.Duration
	probeInterval       time.Duration
	calibrate           int
	cpuWindow           bool
	consulMaxConns      int // 0: Consul's stock limit (200)
	agentBin            string
	seed                uint64
	keep                bool
	verbose             bool
	heapDir             string    // -heap-profiles
	out                 io.Writer // the report; os.Stdout from the command line
	args                string    // the flags that reproduce the run, for the report
}

// flags registers the benchmark's flags on fs with the full run's defaults.
func (o *options) flags(fs *flag.FlagSet) {
	fs.IntVar(&o.services, "services", 5000, "services (one upstream each)")
	fs.IntVar(&o.instances, "instances", 2, "instances per service (one loopback backend port per instance index)")
	fs.IntVar(&o.nodes, "nodes", 1, "Consul nodes holding the instances: 1 registers them with the dev agent itself (TTL checks); N > 1 spreads them over N catalog nodes with checks set through /v1/catalog/register, as a datacenter of many client agents has them")
	fs.DurationVar(&o.duration, "duration", 60*time.Second, "length of each flip window")
	fs.DurationVar(&o.flip, "flip", 100*time.Millisecond, "one check flip every this long (flip windows and churn)")
	fs.DurationVar(&o.wait, "wait", 5*time.Minute, "the agent's consul.wait (blocking-query wait, 1s..10m)")
	fs.DurationVar(&o.idle, "idle", -1, "idle window (default: wait + wait/8, which covers Consul's wait jitter of up to wait/16); 0 skips it")
	fs.DurationVar(&o.baseline, "baseline", 10*time.Second, "window measuring Consul's CPU after registration, before the agent starts (0 skips it)")
	fs.DurationVar(&o.readyTimeout, "ready-timeout", 2*time.Minute, "give up when the agent is not ready with every instance within this long")
	fs.DurationVar(&o.churn, "churn", 10*time.Minute, "churn window: services deregistered and registered again, new unwatched services added and removed, checks flipping (0: off)")
	fs.DurationVar(&o.churnEvery, "churn-every", 250*time.Millisecond, "one service added or removed every this long during -churn")
	fs.DurationVar(&o.probeInterval, "probe-interval", time.Millisecond, "pacing of the convergence probe requests (the measurement resolution)")
	fs.IntVar(&o.calibrate, "calibrate", 2000, "probe requests sent to measure the agent CPU per probe request (0 skips)")
	fs.BoolVar(&o.cpuWindow, "cpu-window", true, "run an extra flip window without probes first, to measure the agent's CPU without probe traffic")
	fs.IntVar(&o.consulMaxConns, "consul-max-conns", 0, "set Consul's limits.http_max_conns_per_client (0: leave Consul's stock limit, 200 per client IP)")
	fs.StringVar(&o.agentBin, "agent-bin", "", "impulse-agent binary (default: go build ./cmd/impulse-agent into a temporary directory)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed of the flip and churn sequence")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (agent config and log)")
	fs.BoolVar(&o.verbose, "v", false, "progress and per-flip lines on stderr")
	fs.StringVar(&o.heapDir, "heap-profiles", "", "write the agent's heap profile at each forced collection (the churn's start and end) to this directory, for go tool pprof -base")
}

// quickPreset is the CI-sized run: 1,000 services, a short wait and idle
// window, a few seconds of flips, no churn. Flags named in set win.
func (o *options) quickPreset(set map[string]bool) {
	preset := func(name string, apply func()) {
		if !set[name] {
			apply()
		}
	}
	preset("services", func() { o.services = 1000 })
	preset("wait", func() { o.wait = 2 * time.Second })
	preset("idle", func() { o.idle = 10 * time.Second })
	preset("duration", func() { o.duration = 3 * time.Second })
	preset("baseline", func() { o.baseline = 3 * time.Second })
	preset("ready-timeout", func() { o.readyTimeout = 45 * time.Second })
	preset("churn", func() { o.churn = 0 })
}

// finish fills the derived defaults and checks the values.
func (o *options) finish() error {
	if o.idle < 0 {
		o.idle = o.wait + o.wait/8
	}
	if o.out == nil {
		o.out = os.Stdout
	}
	if o.services < 1 || o.instances < 1 || o.nodes < 1 || o.flip <= 0 || o.duration <= 0 || o.wait < time.Second ||
		o.readyTimeout <= 0 || o.churn < 0 || o.churnEvery <= 0 || o.consulMaxConns < 0 {
		return fmt.Errorf("need -services >= 1, -instances >= 1, -nodes >= 1, -flip > 0, -duration > 0, -wait >= 1s, " +
			"-ready-timeout > 0, -churn >= 0, -churn-every > 0, -consul-max-conns >= 0")
	}
	return nil
}

func main() {
	var o options
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./test/scale [flags]\n\nConsul scale benchmark (B06). Flags:\n")
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "CI-sized preset: -services 1000 -wait 2s -idle 10s -duration 3s -baseline 3s -ready-timeout 45s -churn 0 (explicit flags win)")
	o.flags(fs)
	_ = fs.Parse(os.Args[1:])
	o.args = strings.Join(os.Args[1:], " ")
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		o.quickPreset(set)
	}
	if err := o.finish(); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(2)
	}
	res, err := run(o)
	if err == nil {
		err = res.failure()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

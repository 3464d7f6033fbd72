// Command scale is the Consul scale benchmark of impulse-agent (case B06): it
// runs the real agent binary against a real Consul dev agent with many
// services, flips health checks, and reports the requests the agent sends to
// Consul, how fast routing follows Consul, and the agent's CPU.
//
//	go run ./test/scale                 # 500 services × 2 instances, wait 5m, 10 s of flips every 100 ms (~7 min)
//	go run ./test/scale -quick          # 50 services, wait 2s, 10 s idle, 3 s of flips (~30 s)
//	make bench-consul                   # the full run
//
// Between the agent and Consul sits a counting reverse proxy that records
// every request (path, index=, arrival and reply times, reply index). The
// phases are: startup, an idle window (the wait period and a margin by
// default), a probe calibration, the flip window, and a final comparison of
// every upstream's backends with Consul's passing instances.
//
// Convergence is measured per flip with HTTP/3 requests to the flipped
// service's host, paced by -probe-interval from the moment the Consul API
// call returns: an added instance has converged at the send time of the
// first request it answers, a removed one at the send time of the first of
// 2×(remaining+1) consecutive requests it does not answer (round-robin would
// have picked it), or of the first 503 when nothing remains. The error is
// +0..(probe interval + one request round trip). A service is not flipped
// again while its previous flip is still being measured.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"
)

type options struct {
	services, instances int
	duration, flip      time.Duration
	wait, idle          time.Duration
	probeInterval       time.Duration
	calibrate           int
	cpuWindow           bool
	consulMaxConns      int
	agentBin            string
	seed                uint64
	keep                bool
	verbose             bool
}

func main() {
	var o options
	fs := flag.NewFlagSet("scale", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./test/scale [flags]\n\nConsul scale benchmark (B06). Flags:\n")
		fs.PrintDefaults()
	}
	quick := fs.Bool("quick", false, "small preset: -services 50 -wait 2s -idle 10s -duration 3s (explicit flags win)")
	fs.IntVar(&o.services, "services", 500, "services (one upstream each)")
	fs.IntVar(&o.instances, "instances", 2, "instances per service (one loopback backend port per instance index)")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "length of the flip window")
	fs.DurationVar(&o.flip, "flip", 100*time.Millisecond, "one check flip every this long")
	fs.DurationVar(&o.wait, "wait", 5*time.Minute, "the agent's consul.wait (blocking-query wait, 1s..10m)")
	fs.DurationVar(&o.idle, "idle", -1, "idle window (default: wait + wait/8, which covers Consul's wait jitter of up to wait/16); 0 skips it")
	fs.DurationVar(&o.probeInterval, "probe-interval", time.Millisecond, "pacing of the convergence probe requests (the measurement resolution)")
	fs.IntVar(&o.calibrate, "calibrate", 2000, "probe requests sent to measure the agent CPU per probe request (0 skips)")
	fs.BoolVar(&o.cpuWindow, "cpu-window", true, "run an extra flip window without probes first, to measure the agent's CPU without probe traffic")
	fs.IntVar(&o.consulMaxConns, "consul-max-conns", 4096, "Consul limits.http_max_conns_per_client (Consul's default 200 is below one connection per watch)")
	fs.StringVar(&o.agentBin, "agent-bin", "", "impulse-agent binary (default: go build ./cmd/impulse-agent into a temporary directory)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed of the flip sequence")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (agent config and log)")
	fs.BoolVar(&o.verbose, "v", false, "progress and per-flip lines on stderr")
	_ = fs.Parse(os.Args[1:])
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		preset := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		preset("services", func() { o.services = 50 })
		preset("wait", func() { o.wait = 2 * time.Second })
		preset("idle", func() { o.idle = 10 * time.Second })
		preset("duration", func() { o.duration = 3 * time.Second })
	}
	if o.idle < 0 {
		o.idle = o.wait + o.wait/8
	}
	if o.services < 1 || o.instances < 1 || o.flip <= 0 || o.duration <= 0 || o.wait < time.Second {
		fmt.Fprintln(os.Stderr, "scale: need -services >= 1, -instances >= 1, -flip > 0, -duration > 0, -wait >= 1s")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

// Command bench is the end-to-end load tool of impulse-agent: a load
// generator for HTTP/3, HTTP/2 and HTTP/1.1, the servers it measures
// against, and the harness behind `make bench`.
//
//	go run ./test/bench load    [flags] URL   closed-loop load: req/s, latency, errors, server CPU/request
//	go run ./test/bench backend [flags]       test backend: HTTP/1.1 and HTTP/2 over TLS
//	go run ./test/bench bare    [flags]       bare quic-go HTTP/3 server answering the same paths (the ceiling)
//	go run ./test/bench idle    [flags] URL   opens N HTTP/3 connections and holds them idle
//	go run ./test/bench run     [flags]       the whole comparison (what scripts/bench.sh runs)
//
// The servers answer GET /small (64 B), GET /1m (1 MiB), GET /big?size=N
// and POST /upload. See test/bench/README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const usage = `Usage: bench COMMAND [flags]

Commands:
  load     closed-loop load generator (HTTP/3, HTTP/2, HTTP/1.1)
  backend  test backend: cleartext HTTP/1.1 and HTTP/2 over TLS
  bare     bare quic-go HTTP/3 server answering the benchmark paths
  idle     open N idle HTTP/3 connections and hold them
  run      the full comparison behind 'make bench'

'bench COMMAND -h' lists the flags of a command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "load":
		err = runLoadCmd(args)
	case "backend":
		err = runBackend(args)
	case "bare":
		err = runBare(args)
	case "idle":
		err = runIdle(args)
	case "run":
		err = runHarness(args)
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "bench: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// signalled returns a channel that receives on SIGINT or SIGTERM.
func signalled() <-chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGINT, syscall.SIGTERM)
	return c
}

// parsePIDs parses "123,456".
func parsePIDs(s string) ([]int, error) {
	var pids []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("-pids: %q is not a process id", f)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// runLoadCmd is the `load` subcommand.
func runLoadCmd(args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "Usage: bench load [flags] URL\n\nFlags:\n")
		fs.PrintDefaults()
	}
	cfg := LoadConfig{}
	fs.StringVar(&cfg.Proto, "proto", "h3", "h3 (QUIC), h2 (over TLS) or h1")
	fs.IntVar(&cfg.Conns, "c", 1, "connections")
	fs.IntVar(&cfg.Streams, "m", 1, "concurrent streams per connection (h1: connections per -c)")
	fs.DurationVar(&cfg.Duration, "d", 5*time.Second, "measured duration")
	fs.Int64Var(&cfg.Requests, "n", 0, "measured request count (overrides -d)")
	fs.DurationVar(&cfg.Warmup, "warmup", time.Second, "warm-up before measuring")
	fs.StringVar(&cfg.Method, "X", "", "method (default GET, or POST with -body-size)")
	fs.Int64Var(&cfg.BodySize, "body-size", 0, "request body bytes (generated)")
	fs.Int64Var(&cfg.Expect, "expect", -1, "expected response body bytes (-1: any)")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "per-request timeout (0: none)")
	fs.StringVar(&cfg.CACert, "cacert", "", "PEM certificate to trust")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "skip certificate verification")
	pids := fs.String("pids", "", "comma-separated server PIDs whose CPU (and peak RSS) is measured")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("load: want exactly one URL")
	}
	cfg.URL = fs.Arg(0)
	if cfg.Method == "" {
		cfg.Method = "GET"
		if cfg.BodySize > 0 {
			cfg.Method = "POST"
		}
	}
	var err error
	if cfg.PIDs, err = parsePIDs(*pids); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-signalled(); cancel() }()
	res, err := RunLoad(ctx, cfg)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		return enc.Encode(res)
	}
	printResult(os.Stdout, res, len(cfg.PIDs) > 0)
	return nil
}

// printResult writes res for a human.
func printResult(w *os.File, res Result, server bool) {
	fmt.Fprintf(w, "%s %s  %d conn × %d streams, %.2f s measured\n", res.Proto, res.URL, res.Conns, res.Streams, res.Seconds)
	fmt.Fprintf(w, "requests   %d ok (%.0f/s), %d errors, %.1f MiB/s of bodies\n", res.Requests, res.ReqPerSec, res.ErrorCount, res.MiBPerSec)
	l := res.Latency
	fmt.Fprintf(w, "latency    p50 %s  p90 %s  p99 %s  max %s  mean %s\n", fmtMS(l.P50), fmtMS(l.P90), fmtMS(l.P99), fmtMS(l.Max), fmtMS(l.Mean))
	if server {
		fmt.Fprintf(w, "server     %.2f CPU s (%.0f%% of a core), %.1f µs CPU/request, peak RSS %.1f MiB\n",
			res.ServerCPU, res.ServerUtil*100, res.CPUPerReqUS, float64(res.PeakRSS)/(1<<20))
	}
	fmt.Fprintf(w, "client     %.2f CPU s (%.0f%% of a core)\n", res.ClientCPU, res.ClientUtil*100)
	kinds := make([]string, 0, len(res.Errors))
	for k := range res.Errors {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "error      %-18s %6d  e.g. %s\n", k, res.Errors[k], res.ErrorSamples[k])
	}
}

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// harnessOpts are the flags of `bench run`.
type harnessOpts struct {
	agentBin     string
	agentBaseBin string
	agentBaseTag string
	caddyBin     string
	caddyDebBin  string
	traefikBin   string
	h2loadBin    string
	runs         int
	duration     time.Duration
	warmup       time.Duration
	// warmupBulk is the warm-up of the 1 MiB shapes: 50 concurrent 1 MiB
	// transfers start in one wave, which takes a while to spread out.
	warmupBulk time.Duration
	idleN      int
	memRuns    int
	largeSize  int64
	largeRuns  int
	sections   string
	shapes     string
	perf       time.Duration
	pprof      time.Duration
	noise      float64
	pin        bool
	keep       bool
}

// has reports whether section is enabled.
func (o *harnessOpts) has(section string) bool { return listHas(o.sections, section) }

// listHas reports whether the comma-separated list contains item.
func listHas(list, item string) bool {
	for s := range strings.SplitSeq(list, ",") {
		if strings.TrimSpace(s) == item {
			return true
		}
	}
	return false
}

// runHarness is the `run` subcommand: every server of the comparison is
// started once (the one under test on its own core), then the matrix, the
// idle-memory test and the large transfers run, each printing its tables.
func runHarness(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var o harnessOpts
	quick := fs.Bool("quick", false, "smoke run: 2 runs of 1 s, 200 idle connections, 64 MiB transfers")
	fs.StringVar(&o.agentBin, "agent", "", "impulse-agent binary (required)")
	fs.StringVar(&o.caddyBin, "caddy", "", "caddy binary (empty: from PATH; \"none\": skip Caddy)")
	fs.StringVar(&o.caddyDebBin, "caddy-deb", "none", "a second caddy binary, Debian's 2.6 (\"none\": no second row)")
	fs.StringVar(&o.traefikBin, "traefik", "none", "traefik binary (\"none\": skip Traefik)")
	fs.StringVar(&o.agentBaseBin, "agent-base", "", "a build of the previous commit of impulse-agent: an extra row in the HTTP/3 small GETs")
	fs.StringVar(&o.agentBaseTag, "agent-base-name", "base", "the name of the -agent-base build in its row label (a commit)")
	fs.StringVar(&o.h2loadBin, "h2load", "", "h2load binary for the TCP section (empty: from PATH; \"none\": skip the section)")
	fs.IntVar(&o.runs, "runs", 5, "alternating runs per target and shape")
	fs.DurationVar(&o.duration, "d", 3*time.Second, "measured time per run")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "warm-up per run (small GET)")
	fs.DurationVar(&o.warmupBulk, "warmup-bulk", 2*time.Second, "warm-up per run of the 1 MiB shapes")
	fs.IntVar(&o.idleN, "idle-n", 1000, "idle HTTP/3 connections for the memory test")
	fs.IntVar(&o.memRuns, "mem-runs", 3, "alternating runs of the memory test")
	fs.Int64Var(&o.largeSize, "large-size", 1<<30, "bytes per large transfer")
	fs.IntVar(&o.largeRuns, "large-runs", 3, "alternating runs of each large transfer")
	fs.StringVar(&o.sections, "sections", "matrix,tcp,memory,large", "comma-separated: matrix, tcp, memory, large (\"none\" with -perf or -pprof: only the profile)")
	fs.StringVar(&o.shapes, "shapes", "small,down,up", "comma-separated matrix payloads: small (64 B GET), down (1 MiB download), up (1 MiB upload)")
	fs.DurationVar(&o.perf, "perf", 0, "also profile the agent under small-GET load with perf for this long (0: no)")
	fs.DurationVar(&o.pprof, "pprof", 0, "also take Go CPU profiles of the agent under small GETs over HTTP/2 (1 conn × 50 streams) and HTTP/1.1 (50 conns), h2load, this long each (0: no)")
	fs.Float64Var(&o.noise, "noise", 0.15, "relative gap below which a comparison is noise")
	fs.BoolVar(&o.pin, "pin", true, "pin the server under test to CPU 0 and the rest to CPU 1 (needs taskset and 2 CPUs)")
	fs.BoolVar(&o.keep, "keep", false, "keep the working directory (configs, perf.data) and print its path")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		defaults := map[string]func(){
			"runs":        func() { o.runs = 2 },
			"d":           func() { o.duration = time.Second },
			"warmup":      func() { o.warmup = 300 * time.Millisecond },
			"warmup-bulk": func() { o.warmupBulk = 500 * time.Millisecond },
			"idle-n":      func() { o.idleN = 200 },
			"mem-runs":    func() { o.memRuns = 1 },
			"large-size":  func() { o.largeSize = 64 << 20 },
			"large-runs":  func() { o.largeRuns = 1 },
		}
		for name, apply := range defaults {
			if !set[name] {
				apply()
			}
		}
	}
	if o.agentBin == "" {
		return fmt.Errorf("run: -agent is required (build it with: go build -o bin/impulse-agent ./cmd/impulse-agent)")
	}
	e, err := newEnv(&o)
	if err != nil {
		return err
	}
	if o.keep {
		defer fmt.Printf("working directory kept: %s\n", e.dir)
	} else {
		defer os.RemoveAll(e.dir)
	}
	defer e.stopAll()
	stop := signalled()
	go func() {
		<-stop
		fmt.Fprintln(os.Stderr, "bench: interrupted; stopping the servers")
		e.stopAll()
		os.RemoveAll(e.dir)
		os.Exit(130)
	}()
	return e.run(&o)
}

// newEnv prepares the working directory, the certificate and the CPU
// placement.
func newEnv(o *harnessOpts) (*env, error) {
	e := &env{agentBin: o.agentBin}
	var err error
	if e.benchBin, err = os.Executable(); err != nil {
		return nil, err
	}
	if e.agentBin, err = filepath.Abs(o.agentBin); err != nil {
		return nil, err
	}
	lookup := func(flagValue, name string) string {
		switch flagValue {
		case "none":
			return ""
		case "":
			p, _ := exec.LookPath(name)
			return p
		}
		return flagValue
	}
	e.caddyBin = lookup(o.caddyBin, "caddy")
	e.caddyDebBin = lookup(o.caddyDebBin, "caddy")
	e.traefikBin = lookup(o.traefikBin, "traefik")
	e.h2loadBin = lookup(o.h2loadBin, "h2load")
	if o.agentBaseBin != "" {
		if e.agentBaseBin, err = filepath.Abs(o.agentBaseBin); err != nil {
			return nil, err
		}
		targetLabels[keyAgentBase] = "impulse-agent " + o.agentBaseTag + " → h1"
	}
	e.labelVersions()
	if e.dir, err = os.MkdirTemp("", "impulse-bench-"); err != nil {
		return nil, err
	}
	cert, err := selfsigned.New("127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	e.certFile, e.keyFile = filepath.Join(e.dir, "cert.pem"), filepath.Join(e.dir, "key.pem")
	if err := os.WriteFile(e.certFile, cert.CertPEM, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(e.keyFile, cert.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	if ts, err := exec.LookPath("taskset"); err == nil && o.pin && runtime.NumCPU() >= 2 {
		e.taskset, e.sutCPU, e.auxCPU = ts, "0", "1"
	}
	return e, nil
}

// run starts the servers and runs the enabled sections.
func (e *env) run(o *harnessOpts) error {
	fmt.Printf("impulse-agent load benchmark — %s, %d CPUs, %s\n", time.Now().Format(time.DateTime), runtime.NumCPU(), cpuModel())
	if e.taskset != "" {
		fmt.Println("placement: server under test pinned to CPU 0; load generator and backend on CPU 1")
	} else {
		fmt.Println("placement: not pinned (needs taskset and 2 CPUs); CPU figures include contention")
	}
	fmt.Printf("runs: %d per target and shape, alternating, each %s measured after a %s warm-up (%s for 1 MiB shapes);\n",
		o.runs, o.duration, o.warmup, o.warmupBulk)
	fmt.Printf("medians shown; gaps < %.0f%% are noise\n", o.noise*100)
	fmt.Printf("UDP buffer limits: net.core.rmem_max=%s net.core.wmem_max=%s (quic-go wants ≈7.5 MB; root may force them)\n\n",
		sysctl("net/core/rmem_max"), sysctl("net/core/wmem_max"))

	_, m, err := e.startBackend("backend", e.auxCPU, true, true)
	if err != nil {
		return err
	}
	e.backendH1, e.backendH2 = m["h1"].(string), m["h2"].(string)

	keys := []string{keyDirect, keyBare, keyAgentH1, keyAgentH2}
	// Optional targets: skipped with a note when their binary is missing
	// or they do not start.
	optional := []struct {
		key, bin, missing string
	}{
		{keyAgentBase, e.agentBaseBin, ""},
		{keyCaddy, e.caddyBin, "no caddy binary (scripts/caddy.sh builds one); Caddy rows and targets are skipped"},
		{keyCaddyDeb, e.caddyDebBin, ""},
		{keyTraefik, e.traefikBin, "no traefik binary (scripts/traefik.sh builds one); Traefik rows are skipped"},
	}
	isOptional := map[string]bool{}
	for _, opt := range optional {
		isOptional[opt.key] = true
		if opt.bin != "" {
			keys = append(keys, opt.key)
		} else if opt.missing != "" {
			fmt.Println("note: " + opt.missing)
		}
	}
	if o.has("tcp") && e.h2loadBin != "" {
		keys = append(keys, keyDirectTLS)
		isOptional[keyDirectTLS] = true
	}
	servers := map[string]*server{}
	var order []*server
	for _, k := range keys {
		s, err := e.startServer(k)
		if err != nil {
			if isOptional[k] {
				fmt.Printf("note: %s did not start, skipped: %v\n", targetLabels[k], err)
				continue
			}
			return fmt.Errorf("starting %s: %w", k, err)
		}
		servers[k] = s
		order = append(order, s)
	}
	warned := false
	checkUDP := func() {
		if w := e.udpBufferWarning(); w != "" && !warned {
			warned = true
			fmt.Printf("note: quic-go could not size its UDP buffers: %s\n      raise them: sysctl -w net.core.rmem_max=7500000 net.core.wmem_max=7500000\n\n", w)
		}
	}
	checkUDP()

	v := &verdicts{noise: o.noise}
	if o.has("matrix") {
		var h3 []*server
		for _, s := range order {
			if s.Proto == "h3" {
				h3 = append(h3, s)
			}
		}
		e.runMatrix(h3, o, v)
	}
	if o.has("tcp") {
		e.runTCP(servers, o, v)
	}
	if o.has("memory") {
		memKeys := []string{keyBare, keyAgentH1}
		for _, k := range []string{keyCaddy, keyTraefik} {
			if servers[k] != nil {
				memKeys = append(memKeys, k)
			}
		}
		e.runMemory(memKeys, o, v)
	}
	if o.has("large") {
		var large []*server
		// Caddy is left out: the targets compare with the bare server, and
		// Caddy is the slowest by far (about 15 s per GiB here).
		for _, k := range []string{keyBare, keyAgentH1, keyAgentH2} {
			if servers[k] != nil {
				large = append(large, servers[k])
			}
		}
		e.runLarge(large, o, v)
	}
	if o.perf > 0 {
		e.runPerf(servers[keyAgentH1], o)
	}
	if o.pprof > 0 {
		e.runPprof(servers[keyAgentH1], o)
	}
	checkUDP()
	if !warned {
		fmt.Println("UDP buffers: no quic-go buffer warning from any server or load generator")
		fmt.Println()
	}
	fmt.Print(v.table().String())
	return nil
}

// udpBufferWarning returns quic-go's UDP buffer warning if a server or a
// load generator printed it.
func (e *env) udpBufferWarning() string {
	for _, c := range e.children {
		if w := bufferWarning(c.Output()); w != "" {
			return w
		}
	}
	return e.loadWarning
}

// bufferWarning returns the line of out with quic-go's "failed to
// (sufficiently) increase receive/send buffer size" warning, or "".
func bufferWarning(out string) string {
	for l := range strings.Lines(out) {
		if strings.Contains(l, "buffer size") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// sysctl returns the value of /proc/sys/NAME, or "?".
func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for l := range strings.Lines(string(b)) {
		if name, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// loadArgs are the `bench load` arguments of one run.
type loadArgs struct {
	path     string
	proto    string
	conns    int
	streams  int
	duration time.Duration
	warmup   time.Duration
	requests int64
	bodySize int64
	expect   int64
	timeout  time.Duration
}

// load runs `bench load -json` on the auxiliary core against s and returns
// its result.
func (e *env) load(s *server, a loadArgs) (Result, error) {
	argv := []string{e.benchBin, "load", "-json", "-proto", s.Proto,
		"-c", strconv.Itoa(a.conns), "-m", strconv.Itoa(a.streams),
		"-warmup", a.warmup.String(), "-cacert", e.certFile,
		"-pids", strconv.Itoa(s.PID()), "-expect", strconv.FormatInt(a.expect, 10),
		"-timeout", a.timeout.String()}
	limit := a.warmup + a.duration + 60*time.Second
	if a.requests > 0 {
		argv = append(argv, "-n", strconv.FormatInt(a.requests, 10))
		limit = 10 * time.Minute
	} else {
		argv = append(argv, "-d", a.duration.String())
	}
	if a.bodySize > 0 {
		argv = append(argv, "-body-size", strconv.FormatInt(a.bodySize, 10))
	}
	argv = append(argv, s.Base+a.path)
	c, err := startChild("load", e.taskset, e.auxCPU, argv)
	if err != nil {
		return Result{}, err
	}
	line, err := c.waitLine(limit, func(l string) bool { return strings.Contains(l, `"req_per_sec"`) })
	if err != nil {
		c.Stop()
		return Result{}, err
	}
	<-c.done
	var r Result
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return Result{}, fmt.Errorf("load output %q: %w", line, err)
	}
	if w := bufferWarning(c.Output()); w != "" && e.loadWarning == "" {
		e.loadWarning = w
	}
	return r, nil
}

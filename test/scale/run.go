package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/impulse-agent/impulse-agent/test/consultest"
)

const checkTTL = "24h" // never expires during a run

func progress(o options, format string, args ...any) {
	if o.verbose {
		fmt.Fprintf(os.Stderr, "%s scale: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// bench is one run's moving parts and the state the benchmark told Consul.
type bench struct {
	o         options
	cc        *api.Client
	node      string // the Consul dev node's name
	reg       registry
	consulPID int
	ports     []int // backend port of each instance index
	proxy     *countingProxy
	ag        *agentProc
	rng       *rand.Rand
	passing   [][]bool // per service and instance: the check set passing
	present   []bool   // per service: registered (the churn deregisters some)
	res       *result
}

// expect returns the instances of service i that should route: the passing
// ones while it is registered.
func (b *bench) expect(i int) []int {
	if !b.present[i] {
		return nil
	}
	var out []int
	for k, p := range b.passing[i] {
		if p {
			out = append(out, k)
		}
	}
	return out
}

// run runs the benchmark and prints its report to o.out. The error is for
// a run that could not take place (Consul, the build, the agent's start);
// an agent that never gets ready or routes unlike Consul is in the result
// (result.failure), which has then been reported as far as it got.
func run(o options) (*result, error) {
	began := time.Now()
	res := &result{o: o, build: gitDescribe(), loadStart: loadavg()}
	dir, err := os.MkdirTemp("", "impulse-scale-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		defer fmt.Fprintf(os.Stderr, "scale: kept %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	// --- The backends, Consul (stock limits unless -consul-max-conns)
	// with every service, the counting proxy, the agent.
	bin := o.agentBin
	if bin == "" {
		progress(o, "building impulse-agent")
		if bin, err = buildAgent(dir); err != nil {
			return nil, err
		}
	}
	be, err := startBackends(o.instances)
	if err != nil {
		return nil, err
	}
	defer be.close()

	// The services are in Consul's configuration, loaded at its start and
	// synced to the catalog in one pass: registered one by one through the
	// API, each registration makes the agent compare its whole local state
	// with the catalog again (10,000 instances took 4 minutes).
	progress(o, "starting Consul with %d services × %d instances", o.services, o.instances)
	regStart := time.Now()
	// A dev agent logs at DEBUG, and its anti-entropy logs "Service in
	// sync" and "Check in sync" for every local instance and check on each
	// sync: 20,000 lines per flip at 5,000 services, most of the agent's CPU
	// per flip. INFO is Consul's default outside -dev, what production runs.
	cfg := "log_level = \"INFO\"\n"
	if o.nodes <= 1 {
		cfg += servicesHCL(o, be.ports)
	}
	if o.consulMaxConns > 0 {
		cfg += fmt.Sprintf("limits {\n  http_max_conns_per_client = %d\n}\n", o.consulMaxConns)
	}
	consul, stopConsul, err := consultest.StartMain(consultest.WithConfig(cfg))
	if err != nil {
		return nil, err
	}
	failed := true
	defer func() { stopConsul(failed) }()
	b := &bench{o: o, cc: consul.Client(), node: consul.Node(), consulPID: childPID("consul"), res: res,
		rng: rand.New(rand.NewPCG(o.seed, 0x5ca1e)), ports: be.ports}
	b.reg = registry{cc: b.cc, node: b.node, nodes: o.nodes}
	if o.nodes > 1 {
		progress(o, "registering the instances on %d catalog nodes", o.nodes)
		if err := b.reg.registerAll(o.services, o.instances, be.ports); err != nil {
			return nil, err
		}
	}
	b.passing, b.present = make([][]bool, o.services), slices.Repeat([]bool{true}, o.services)
	for i := range b.passing {
		b.passing[i] = slices.Repeat([]bool{true}, o.instances)
	}
	if err := waitCatalog(b.cc, o.services*o.instances); err != nil {
		return nil, fmt.Errorf("waiting for the catalog: %w", err)
	}
	res.regTook = time.Since(regStart)
	if o.baseline > 0 {
		progress(o, "Consul CPU without the agent, %s", o.baseline)
		k0 := processCPU(b.consulPID)
		time.Sleep(o.baseline) // a measurement window
		res.baselineConsulCPU = processCPU(b.consulPID) - k0
	}

	if b.proxy, err = startProxy(consul.Addr()); err != nil {
		return nil, err
	}
	defer b.proxy.close()
	prevLog := log.Writer()
	log.SetOutput(logFilter{p: b.proxy, next: prevLog})
	defer log.SetOutput(prevLog)
	cert, certFile, keyFile, err := writeCert(dir)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(agentConfig(o, b.proxy.addr(), certFile, keyFile)), 0o644); err != nil {
		return nil, err
	}
	progress(o, "starting impulse-agent (%d upstreams)", o.services)
	b.proxy.mark("startup")
	agentStart := time.Now()
	if b.ag, err = startAgent(bin, cfgPath, filepath.Join(dir, "agent.log")); err != nil {
		return nil, err
	}
	defer b.ag.stop()
	b.ag.heapDir = o.heapDir
	defer func() {
		if failed {
			fmt.Fprintf(os.Stderr, "agent log tail (%s):\n%s\n", b.ag.logPath, tail(b.ag.logPath))
		}
	}()
	res.atStart = b.ag.sample(false)

	// --- Startup, then the measured phases; the report covers what ran.
	err = b.phases(agentStart, cert.Pool)
	res.refusedEarly = b.proxy.refusedBeforeRequest()
	res.phases = b.proxy.phaseList()
	for i, ph := range res.phases {
		if ph.end.IsZero() {
			ph.end = time.Now()
		}
		res.phases[i].statuses = b.proxy.summarize(ph.start, ph.end).statuses
	}
	res.all = b.proxy.summarize(began, time.Now().Add(time.Hour))
	res.total = time.Since(began)
	if err != nil {
		return nil, err
	}
	res.report(o.out)
	failed = res.failure() != nil
	return res, nil
}

// phases runs startup, the idle window, the calibration, the flip windows,
// the comparison and the churn. It returns early, with res.ready false,
// when the agent does not get ready.
func (b *bench) phases(agentStart time.Time, roots *x509.CertPool) error {
	o, res, ag := b.o, b.res, b.ag
	if !b.startup(agentStart) {
		return nil
	}
	progress(o, "agent ready in %s, complete in %s; %d requests to Consul",
		res.readyIn.Round(time.Millisecond), res.completeIn.Round(time.Millisecond), res.startupReqs.total)

	if o.idle > 0 {
		progress(o, "idle window %s", o.idle)
		b.proxy.mark("idle")
		c0, k0, t0 := processCPU(ag.pid), processCPU(b.consulPID), time.Now()
		time.Sleep(o.idle) // a measurement window
		res.idleReqs = b.proxy.summarize(t0, time.Now())
		res.idleCPU, res.idleConsulCPU = processCPU(ag.pid)-c0, processCPU(b.consulPID)-k0
	}

	pr := newProber(ag.listenAddr, roots)
	defer pr.close() // closed below unless a phase fails; closing twice is harmless
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if o.calibrate > 0 {
		progress(o, "calibrating: %d probe requests", o.calibrate)
		b.proxy.mark("calibration")
		if err := b.calibrate(ctx, pr); err != nil {
			return err
		}
	}

	var err error
	if o.cpuWindow {
		progress(o, "flipping a check every %s for %s, no probes", o.flip, o.duration)
		b.proxy.mark("flips without probes")
		if res.quiet, err = b.flipWindow(ctx, nil); err != nil {
			return err
		}
	}
	progress(o, "flipping a check every %s for %s, probing convergence", o.flip, o.duration)
	b.proxy.mark("flips with probes")
	if res.probed, err = b.flipWindow(ctx, pr); err != nil {
		return err
	}
	pr.close() // its connection would otherwise count among the churn's descriptors

	progress(o, "comparing the routing with Consul")
	b.proxy.mark("comparison")
	final, err := waitRouting(ag, b.cc, b.reg, o.services, b.expect, 10*time.Second)
	if err != nil {
		return err
	}
	res.final = &final

	if o.churn > 0 {
		if res.churn, err = b.churnWindow(); err != nil {
			return err
		}
	}
	b.proxy.mark("end")
	res.atEnd = ag.sample(false)
	if !ag.alive() {
		return errors.New("impulse-agent exited during the run")
	}
	return nil
}

// startup waits for /v1/ready, then for every upstream to have every
// instance, then for the agent's requests to settle (every watch's first
// blocking query sent), and fills the startup figures. It reports whether
// the agent got ready in time.
func (b *bench) startup(agentStart time.Time) bool {
	o, res, ag := b.o, b.res, b.ag
	deadline := agentStart.Add(o.readyTimeout)
	err := waitUntil(time.Until(deadline), 10*time.Millisecond, ag.ready)
	if err == nil {
		res.readyIn = time.Since(agentStart)
		err = waitUntil(time.Until(deadline), 50*time.Millisecond, func() bool { return b.complete() == o.services })
	}
	if err != nil {
		end := time.Now()
		res.cold = b.proxy.rate(agentStart, end)
		res.startupReqs = b.proxy.summarize(agentStart, end)
		res.notReady = fmt.Sprintf("agent not ready with every instance within %s (ready: %v); %d of %d upstreams complete",
			o.readyTimeout, res.readyIn > 0, b.complete(), o.services)
		res.atReady = ag.sample(false)
		return false
	}
	completeAt := time.Now()
	res.ready, res.completeIn = true, completeAt.Sub(agentStart)
	res.cold = b.proxy.rate(agentStart, completeAt)
	res.settleTook, res.settleErr = b.proxy.waitSettled(agentStart, 10*time.Second)
	res.startupReqs = b.proxy.summarize(agentStart, time.Now())
	res.startupCPU = processCPU(ag.pid)
	res.atReady = ag.sample(false)
	return true
}

// complete counts the upstreams that have synced every instance.
func (b *bench) complete() int {
	ups, err := b.ag.upstreams()
	if err != nil {
		return 0
	}
	n := 0
	for _, u := range ups {
		if !u.Pending && len(u.Backends) == b.o.instances {
			n++
		}
	}
	return n
}

// calibrate measures the agent's CPU per probe request on a steady service.
func (b *bench) calibrate(ctx context.Context, pr *prober) error {
	c0 := processCPU(b.ag.pid)
	next := time.Now()
	for range b.o.calibrate {
		a := pr.get(ctx, serviceName(0))
		if a.err != nil || a.status != 200 {
			return fmt.Errorf("calibration request to %s.test: status %d, %v", serviceName(0), a.status, a.err)
		}
		b.res.calRTT = append(b.res.calRTT, a.rtt)
		next = next.Add(b.o.probeInterval)
		if d := time.Until(next); d > 0 {
			time.Sleep(d) // pacing
		} else {
			next = time.Now()
		}
	}
	b.res.calCPUPerReq = (processCPU(b.ag.pid) - c0) / float64(b.o.calibrate)
	return nil
}

func gitDescribe() string {
	out, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// registerInstance registers instance id of service name at port with a
// passing TTL check.
func registerInstance(cc *api.Client, name, id string, port int) error {
	err := cc.Agent().ServiceRegister(&api.AgentServiceRegistration{
		ID: id, Name: name, Address: "127.0.0.1", Port: port,
		Check: &api.AgentServiceCheck{CheckID: id + ":ttl", TTL: checkTTL, Status: api.HealthPassing},
	})
	if err != nil {
		return fmt.Errorf("register %s: %w", id, err)
	}
	return nil
}

// servicesHCL is the Consul configuration that registers every instance
// with a TTL check that starts passing (the same local service and check
// as registerInstance makes through the API).
func servicesHCL(o options, ports []int) string {
	var sb strings.Builder
	for i := range o.services {
		for k := range o.instances {
			id := instanceID(i, k)
			fmt.Fprintf(&sb, "services {\n  id = %q\n  name = %q\n  address = \"127.0.0.1\"\n  port = %d\n"+
				"  check {\n    id = %q\n    name = \"ttl\"\n    ttl = %q\n    status = \"passing\"\n  }\n}\n",
				id, serviceName(i), ports[k], id+":ttl", checkTTL)
		}
	}
	return sb.String()
}

// waitCatalog waits until n service checks are passing in the catalog.
// Consul's sync slows down as the node fills (10,000 instances took 1.5 to
// 2 minutes on 2 shared cores, more when others load them), so the wait
// allows 2 minutes plus 30 s per 1,000 instances.
func waitCatalog(cc *api.Client, n int) error {
	got := 0
	timeout := 2*time.Minute + time.Duration(n)*30*time.Millisecond
	err := waitUntil(timeout, 100*time.Millisecond, func() bool {
		checks, _, err := cc.Health().State(api.HealthPassing, nil)
		if err != nil {
			return false
		}
		got = 0
		for _, c := range checks {
			if strings.HasPrefix(c.ServiceName, "svc") {
				got++
			}
		}
		return got == n
	})
	if err != nil {
		return fmt.Errorf("%d of %d instances passing in the catalog: %w", got, n, err)
	}
	return nil
}

// waitUntil polls cond every every until it holds or timeout passes.
func waitUntil(timeout, every time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout.Round(time.Millisecond))
		}
		time.Sleep(every)
	}
	return nil
}

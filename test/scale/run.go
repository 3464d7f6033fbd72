package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

func run(o options) (err error) {
	began, load := time.Now(), loadavg()
	dir, err := os.MkdirTemp("", "impulse-scale-")
	if err != nil {
		return err
	}
	if o.keep {
		defer fmt.Fprintf(os.Stderr, "scale: kept %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}

	// --- Consul, backends, the counting proxy, the agent.
	bin := o.agentBin
	if bin == "" {
		progress(o, "building impulse-agent")
		if bin, err = buildAgent(dir); err != nil {
			return err
		}
	}
	progress(o, "starting Consul")
	consul, stopConsul, err := consultest.StartMain(consultest.WithConfig(
		fmt.Sprintf("limits {\n  http_max_conns_per_client = %d\n}\n", o.consulMaxConns)))
	if err != nil {
		return err
	}
	defer func() { stopConsul(err != nil) }()
	consulPID := childPID("consul")
	cc := consul.Client()

	be, err := startBackends(o.instances)
	if err != nil {
		return err
	}
	defer be.close()

	progress(o, "registering %d services × %d instances", o.services, o.instances)
	regStart := time.Now()
	if err := register(cc, o, be.ports); err != nil {
		return err
	}
	if err := waitCatalog(cc, o.services*o.instances); err != nil {
		return err
	}
	regTook := time.Since(regStart)

	proxy, err := startProxy(consul.Addr())
	if err != nil {
		return err
	}
	defer proxy.close()

	cert, certFile, keyFile, err := writeCert(dir)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(agentConfig(o, proxy.addr(), certFile, keyFile)), 0o644); err != nil {
		return err
	}
	progress(o, "starting impulse-agent (%d upstreams)", o.services)
	agentStart := time.Now()
	ag, err := startAgent(bin, cfgPath, filepath.Join(dir, "agent.log"))
	if err != nil {
		return err
	}
	defer ag.stop()
	defer func() {
		if err != nil {
			fmt.Fprintf(os.Stderr, "agent log tail (%s):\n%s\n", ag.logPath, tail(ag.logPath))
		}
	}()

	// --- Startup: ready, and every upstream has every instance.
	full := func() bool {
		ups, err := ag.upstreams()
		if err != nil || len(ups) != o.services {
			return false
		}
		for _, u := range ups {
			if u.Pending || len(u.Backends) != o.instances {
				return false
			}
		}
		return true
	}
	if err := waitUntil(2*time.Minute, 10*time.Millisecond, func() bool { return ag.ready() && full() }); err != nil {
		synced := 0
		if ups, uerr := ag.upstreams(); uerr == nil {
			for _, u := range ups {
				if !u.Pending && len(u.Backends) == o.instances {
					synced++
				}
			}
		}
		st := proxy.statuses()
		return fmt.Errorf("agent not ready with every instance: %w; %d of %d upstreams complete; Consul replies by status %v"+
			" (429: raise -consul-max-conns, Consul's limits.http_max_conns_per_client, above the number of watches)",
			err, synced, o.services, st)
	}
	startupTook := time.Since(agentStart)
	time.Sleep(time.Second) // let every watch issue its first blocking query
	startupReqs := proxy.summarize(agentStart, time.Now())
	startupCPU := processCPU(ag.pid)
	progress(o, "agent ready in %s; %d requests to Consul", startupTook.Round(time.Millisecond), startupReqs.total)

	// --- Idle window.
	var idleReqs requestSummary
	var idleCPU, idleConsulCPU float64
	if o.idle > 0 {
		progress(o, "idle window %s", o.idle)
		c0, k0, t0 := processCPU(ag.pid), processCPU(consulPID), time.Now()
		time.Sleep(o.idle)
		idleReqs = proxy.summarize(t0, time.Now())
		idleCPU, idleConsulCPU = processCPU(ag.pid)-c0, processCPU(consulPID)-k0
	}

	// --- Probe calibration: CPU per probe request on a steady service.
	pr := newProber(ag.listenAddr, cert.Pool)
	defer pr.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calCPUPerReq float64
	var calRTT []time.Duration
	if o.calibrate > 0 {
		progress(o, "calibrating: %d probe requests", o.calibrate)
		c0 := processCPU(ag.pid)
		next := time.Now()
		for range o.calibrate {
			a := pr.get(ctx, serviceName(0))
			if a.err != nil || a.status != 200 {
				return fmt.Errorf("calibration request to %s.test: status %d, %v", serviceName(0), a.status, a.err)
			}
			calRTT = append(calRTT, a.rtt)
			next = next.Add(o.probeInterval)
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			} else {
				next = time.Now()
			}
		}
		calCPUPerReq = (processCPU(ag.pid) - c0) / float64(o.calibrate)
	}

	// --- Flip windows: first without probes (the agent's own CPU), then
	// with probes (convergence).
	passing := make([][]bool, o.services) // what this run told Consul
	for i := range passing {
		passing[i] = slices.Repeat([]bool{true}, o.instances)
	}
	rng := rand.New(rand.NewPCG(o.seed, 0x5ca1e))
	var quiet *windowResult
	if o.cpuWindow {
		progress(o, "flipping a check every %s for %s, no probes", o.flip, o.duration)
		if quiet, err = flipWindow(ctx, o, cc, proxy, ag, nil, consulPID, rng, passing); err != nil {
			return err
		}
		time.Sleep(time.Second)
	}
	progress(o, "flipping a check every %s for %s, probing convergence", o.flip, o.duration)
	probed, err := flipWindow(ctx, o, cc, proxy, ag, pr, consulPID, rng, passing)
	if err != nil {
		return err
	}

	// --- Final routing against Consul's final state.
	progress(o, "comparing final routing with Consul")
	time.Sleep(time.Second)
	mismatches, err := compareFinal(ag, cc, consul.Node(), o, passing)
	if err != nil {
		return err
	}
	if !ag.alive() {
		return errors.New("impulse-agent exited during the run")
	}

	report(o, reportData{
		regTook: regTook, startupTook: startupTook, startupReqs: startupReqs, startupCPU: startupCPU,
		idleReqs: idleReqs, idleCPU: idleCPU, idleConsulCPU: idleConsulCPU,
		calCPUPerReq: calCPUPerReq, calRTT: calRTT, quiet: quiet, probed: probed,
		mismatches: mismatches, total: time.Since(began), build: gitDescribe(), loadStart: load,
	})
	if len(mismatches) > 0 {
		return fmt.Errorf("final routing differs from Consul for %d upstreams", len(mismatches))
	}
	return nil
}

// windowResult is one flip window.
type windowResult struct {
	flips          []*flipResult
	skipped        int
	flipping       time.Duration // first flip → last flip
	window         time.Duration // first flip → last convergence + 200 ms
	reqs           requestSummary
	cpu, consulCPU float64
}

// flipWindow flips one check of a random service every o.flip for
// o.duration and, when pr is not nil, measures each flip's convergence. A
// service is not flipped while its previous flip is being measured.
func flipWindow(ctx context.Context, o options, cc *api.Client, proxy *countingProxy, ag *agentProc, pr *prober,
	consulPID int, rng *rand.Rand, passing [][]bool) (*windowResult, error) {
	var (
		mu      sync.Mutex
		pending = map[int]bool{}
		wg      sync.WaitGroup
		r       = &windowResult{}
	)
	cpu0, consul0 := processCPU(ag.pid), processCPU(consulPID)
	start := time.Now()
	tick := time.NewTicker(o.flip)
	defer tick.Stop()
	for time.Since(start) < o.duration {
		<-tick.C
		mu.Lock()
		svc := -1
		for range 100 * o.services {
			if s := rng.IntN(o.services); !pending[s] {
				svc = s
				break
			}
		}
		if svc < 0 {
			r.skipped++
			mu.Unlock()
			continue
		}
		if pr != nil {
			pending[svc] = true
		}
		mu.Unlock()
		inst := rng.IntN(o.instances)
		f := &flipResult{svc: svc, inst: inst, toPassing: !passing[svc][inst]}
		passing[svc][inst] = f.toPassing
		for _, p := range passing[svc] {
			if p {
				f.remaining++
			}
		}
		status := api.HealthCritical
		if f.toPassing {
			status = api.HealthPassing
		}
		f.t0 = time.Now()
		if err := cc.Agent().UpdateTTL(instanceID(svc, inst)+":ttl", "scale", status); err != nil {
			return nil, fmt.Errorf("set check of %s: %w", instanceID(svc, inst), err)
		}
		f.t1 = time.Now()
		r.flips = append(r.flips, f)
		if pr == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
			pr.measure(mctx, f, o.probeInterval)
			mcancel()
			mu.Lock()
			delete(pending, f.svc)
			mu.Unlock()
		}()
	}
	r.flipping = time.Since(start)
	wg.Wait()
	time.Sleep(200 * time.Millisecond) // replies to the last changes, and the blocking queries that follow them
	end := time.Now()
	r.window = end.Sub(start)
	r.cpu, r.consulCPU = processCPU(ag.pid)-cpu0, processCPU(consulPID)-consul0
	r.reqs = proxy.summarize(start, end)
	for _, f := range r.flips {
		f.consulReply = proxy.firstChange("/v1/health/service/"+serviceName(f.svc), f.t0)
	}
	return r, nil
}

func gitDescribe() string {
	out, err := exec.Command("git", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// register registers every instance with a passing TTL check, 16 at a time.
func register(cc *api.Client, o options, ports []int) error {
	type job struct{ i, k int }
	jobs := make(chan job)
	errc := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				id := instanceID(j.i, j.k)
				err := cc.Agent().ServiceRegister(&api.AgentServiceRegistration{
					ID: id, Name: serviceName(j.i), Address: "127.0.0.1", Port: ports[j.k],
					Check: &api.AgentServiceCheck{CheckID: id + ":ttl", TTL: checkTTL, Status: api.HealthPassing},
				})
				if err != nil {
					select {
					case errc <- fmt.Errorf("register %s: %w", id, err):
					default:
					}
				}
			}
		}()
	}
	for i := range o.services {
		for k := range o.instances {
			jobs <- job{i, k}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// waitCatalog waits until n service checks are passing in the catalog.
func waitCatalog(cc *api.Client, n int) error {
	return waitUntil(2*time.Minute, 100*time.Millisecond, func() bool {
		checks, _, err := cc.Health().State(api.HealthPassing, nil)
		if err != nil {
			return false
		}
		got := 0
		for _, c := range checks {
			if strings.HasPrefix(c.ServiceName, "svc") {
				got++
			}
		}
		return got == n
	})
}

func waitUntil(timeout, every time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		time.Sleep(every)
	}
	return nil
}

// compareFinal compares every upstream's backend set with the instances
// Consul reports passing (and with what this run set). It returns one line
// per mismatch.
func compareFinal(ag *agentProc, cc *api.Client, node string, o options, passing [][]bool) ([]string, error) {
	ups, err := ag.upstreams()
	if err != nil {
		return nil, err
	}
	got := map[string][]string{}
	for _, u := range ups {
		b := slices.Clone(u.Backends)
		slices.Sort(b)
		got[u.Name] = b
	}
	var out []string
	for i := range o.services {
		name := serviceName(i)
		entries, _, err := cc.Health().Service(name, "", true, nil)
		if err != nil {
			return nil, err
		}
		var want, mine []string
		for _, e := range entries {
			want = append(want, e.Node.Node+"/"+e.Service.ID)
		}
		for k, p := range passing[i] {
			if p {
				mine = append(mine, node+"/"+instanceID(i, k))
			}
		}
		slices.Sort(want)
		if !slices.Equal(got[name], want) {
			out = append(out, fmt.Sprintf("%s: agent %v, consul %v", name, got[name], want))
		} else if !slices.Equal(want, mine) {
			out = append(out, fmt.Sprintf("%s: consul %v, set by the benchmark %v", name, want, mine))
		}
	}
	return out, nil
}

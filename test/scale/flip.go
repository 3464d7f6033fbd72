package main

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"
)

// windowResult is one flip window.
type windowResult struct {
	flips          []*flipResult
	skipped        int
	flipping       time.Duration // first flip → last flip
	window         time.Duration // first flip → requests settled after the last change
	settleErr      error         // the agent's requests did not settle
	reqs           requestSummary
	cpu, consulCPU float64
}

// flip sets one check of service svc, instance inst, to the opposite of
// what it was, and returns the flip with its API call's times.
func (b *bench) flip(svc, inst int) (*flipResult, error) {
	f := &flipResult{svc: svc, inst: inst, toPassing: !b.passing[svc][inst]}
	b.passing[svc][inst] = f.toPassing
	for _, p := range b.passing[svc] {
		if p {
			f.remaining++
		}
	}
	status := api.HealthCritical
	if f.toPassing {
		status = api.HealthPassing
	}
	f.t0 = time.Now()
	if err := b.reg.setCheck(serviceName(svc), instanceID(svc, inst), inst, status); err != nil {
		return nil, err
	}
	f.t1 = time.Now()
	return f, nil
}

// flipWindow flips one check of a random service every o.flip for
// o.duration and, when pr is not nil, measures each flip's convergence. A
// service is not flipped while its previous flip is being measured. The
// window ends when the routing has followed every flip (probed, or read
// from /v1/upstreams without probes) and the agent's requests to Consul
// have settled, so that it counts every request the flips caused.
func (b *bench) flipWindow(ctx context.Context, pr *prober) (*windowResult, error) {
	o := b.o
	var (
		mu      sync.Mutex
		pending = map[int]bool{}
		wg      sync.WaitGroup
		r       = &windowResult{}
		flipped = map[int]bool{}
	)
	cpu0, consul0 := processCPU(b.ag.pid), processCPU(b.consulPID)
	start := time.Now()
	tick := time.NewTicker(o.flip)
	defer tick.Stop()
	for time.Since(start) < o.duration {
		<-tick.C
		mu.Lock()
		svc := -1
		for range 100 * o.services {
			if s := b.rng.IntN(o.services); !pending[s] && b.present[s] {
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
		f, err := b.flip(svc, b.rng.IntN(o.instances))
		if err != nil {
			return nil, err
		}
		r.flips = append(r.flips, f)
		flipped[svc] = true
		if pr == nil {
			continue
		}
		wg.Go(func() {
			mctx, mcancel := context.WithTimeout(ctx, 10*time.Second)
			pr.measure(mctx, f, o.probeInterval)
			mcancel()
			mu.Lock()
			delete(pending, f.svc)
			mu.Unlock()
		})
	}
	r.flipping = time.Since(start)
	wg.Wait()
	if pr == nil {
		_ = waitUntil(10*time.Second, 20*time.Millisecond, func() bool { return b.follows(flipped) })
	}
	_, r.settleErr = b.proxy.waitSettled(start, 5*time.Second)
	end := time.Now()
	r.window = end.Sub(start)
	r.cpu, r.consulCPU = processCPU(b.ag.pid)-cpu0, processCPU(b.consulPID)-consul0
	r.reqs = b.proxy.summarize(start, end)
	for _, f := range r.flips {
		f.consulReply = b.proxy.firstChange("/v1/health/service/"+serviceName(f.svc), f.t0)
	}
	return r, nil
}

// follows reports whether the agent routes every service in svcs to the
// instances the benchmark set passing.
func (b *bench) follows(svcs map[int]bool) bool {
	got, err := b.ag.routing()
	if err != nil {
		return false
	}
	for i := range svcs {
		var want []string
		for _, k := range b.expect(i) {
			want = append(want, b.reg.key(serviceName(i), k, instanceID(i, k)))
		}
		slices.Sort(want)
		if !slices.Equal(got[serviceName(i)], want) {
			return false
		}
	}
	return true
}

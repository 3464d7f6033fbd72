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
		svc, inst := -1, b.rng.IntN(o.instances)
		if b.rng.IntN(2) == 0 {
			// Every other flip, on average, brings a failing instance back:
			// additions are measured as often as removals.
			svc, inst = b.failing(pending)
		}
		for i := 0; svc < 0 && i < 100*o.services; i++ {
			if s := b.rng.IntN(o.services); !pending[s] && b.present[s] {
				svc = s
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
		f, err := b.flip(svc, inst)
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
		// The change feed's status answers carry a check's new status
		// (the agent applies it without reading the service); a re-read
		// carries any other change.
		f.consulReply = b.proxy.firstChange(f.t0, "/v1/health/service/"+serviceName(f.svc),
			"/v1/health/state/critical", "/v1/health/state/warning")
	}
	return r, nil
}

// failing returns a service not pending with a failing instance, and that
// instance, or -1 when there is none.
func (b *bench) failing(pending map[int]bool) (svc, inst int) {
	var down [][2]int
	for s, insts := range b.passing {
		for i, ok := range insts {
			if !ok && !pending[s] && b.present[s] {
				down = append(down, [2]int{s, i})
			}
		}
	}
	if len(down) == 0 {
		return -1, 0
	}
	d := down[b.rng.IntN(len(down))]
	return d[0], d[1]
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

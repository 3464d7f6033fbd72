package main

import (
	"fmt"
	"time"
)

// churnResult is the churn window: services deregistered and registered
// again, unwatched services added and removed, checks flipping; the
// agent's process before and after, and its routing at the end.
type churnResult struct {
	dur                      time.Duration
	removed, restored        int // configured (watched) services
	extraAdded, extraRemoved int // services no upstream names, each name new
	flips                    int
	absentEnd, extrasEnd     int
	slack                    int // most services absent, and most extras registered, at once
	reqs                     requestSummary
	start, end               procSample
	final                    routingCheck
	settleErr                error
}

// extraName is the name of the j-th unwatched service the churn adds.
func extraName(j int) string { return fmt.Sprintf("xtra%06d", j) }

// churnWindow runs o.churn of churn. Every o.churnEvery it either
// deregisters every instance of a random watched service or registers a
// deregistered one again (turn about), or registers a new unwatched service
// under a name never used before or deregisters the oldest one (the other
// turns), keeping at most slack = clamp(N/100, 2, 50) of each, so the total
// stays near N; every o.flip it flips a check of a registered watched
// service. Before and after it samples the agent (forced GC first); after
// it waits for the routing to equal Consul's.
func (b *bench) churnWindow() (*churnResult, error) {
	o, n := b.o, b.o.services
	r := &churnResult{slack: max(2, min(50, n/100))}
	progress(o, "churn for %s: a service added or removed every %s, a check flipped every %s", o.churn, o.churnEvery, o.flip)
	r.start = b.ag.sample(true)
	b.proxy.mark("churn")
	var absent []int // watched services deregistered
	var extras []int // unwatched services registered, oldest first
	nextExtra, turn := 0, 0
	start := time.Now()
	flipT, churnT := time.NewTicker(o.flip), time.NewTicker(o.churnEvery)
	defer flipT.Stop()
	defer churnT.Stop()
	for time.Since(start) < o.churn {
		select {
		case <-flipT.C:
			svc := b.rng.IntN(n)
			for !b.present[svc] {
				svc = b.rng.IntN(n)
			}
			if _, err := b.flip(svc, b.rng.IntN(o.instances)); err != nil {
				return nil, err
			}
			r.flips++
		case <-churnT.C:
			turn++
			grow := func(have int) bool { return have == 0 || (have < r.slack && b.rng.IntN(2) == 0) }
			switch {
			case turn%2 == 1 && grow(len(absent)):
				svc := b.rng.IntN(n)
				for !b.present[svc] {
					svc = b.rng.IntN(n)
				}
				for k := range o.instances {
					if err := b.reg.deregister(serviceName(svc), instanceID(svc, k), k); err != nil {
						return nil, err
					}
				}
				b.present[svc] = false
				absent = append(absent, svc)
				r.removed++
			case turn%2 == 1:
				j := b.rng.IntN(len(absent))
				svc := absent[j]
				absent[j] = absent[len(absent)-1]
				absent = absent[:len(absent)-1]
				for k := range o.instances {
					if err := b.reg.register(serviceName(svc), instanceID(svc, k), k, b.ports[k]); err != nil {
						return nil, err
					}
					b.passing[svc][k] = true
				}
				b.present[svc] = true
				r.restored++
			case grow(len(extras)):
				for k := range o.instances {
					name := extraName(nextExtra)
					if err := b.reg.register(name, fmt.Sprintf("%s-%d", name, k), k, b.ports[k]); err != nil {
						return nil, err
					}
				}
				extras = append(extras, nextExtra)
				nextExtra++
				r.extraAdded++
			default:
				name := extraName(extras[0])
				for k := range o.instances {
					if err := b.reg.deregister(name, fmt.Sprintf("%s-%d", name, k), k); err != nil {
						return nil, err
					}
				}
				extras = extras[1:]
				r.extraRemoved++
			}
		}
	}
	r.dur = time.Since(start)
	r.absentEnd, r.extrasEnd = len(absent), len(extras)

	progress(o, "comparing the routing with Consul after the churn")
	b.proxy.mark("comparison after churn")
	var err error
	if r.final, err = waitRouting(b.ag, b.cc, b.reg, n, b.expect, 15*time.Second); err != nil {
		return nil, err
	}
	_, r.settleErr = b.proxy.waitSettled(start.Add(r.dur), 5*time.Second)
	r.reqs = b.proxy.summarize(start, time.Now())
	r.end = b.ag.sample(true)
	return r, nil
}

// rates is the churn's add/remove and flip rates, measured and nominal.
func (r *churnResult) rates(o options) string {
	events := r.removed + r.restored + r.extraAdded + r.extraRemoved
	sec := max(r.dur.Seconds(), 1e-9)
	return fmt.Sprintf("%.1f services added or removed per second (nominal %.1f), %.1f flips per second (nominal %.1f)",
		float64(events)/sec, 1/o.churnEvery.Seconds(), float64(r.flips)/sec, 1/o.flip.Seconds())
}

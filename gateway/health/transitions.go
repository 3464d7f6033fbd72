package health

import "time"

// ObserveCheck records one active-check result and applies the
// consecutive thresholds; reason describes a failure.
func (s *State) ObserveCheck(ok bool, reason string) {
	if s.active == nil {
		return
	}
	s.mu.Lock()
	s.lastCheck, s.lastOK, s.lastReason = time.Now(), ok, reason
	if ok {
		s.lastReason = ""
	}
	from := s.status
	if ok {
		s.okRun++
		s.failRun = 0
		if s.status != Healthy && (s.status == Unknown || s.okRun >= s.active.HealthyThreshold) {
			// Unknown → healthy on the first pass; unhealthy needs the threshold.
			s.status, s.reason = Healthy, ""
		}
	} else {
		s.failRun++
		s.okRun = 0
		s.reason = reason
		if s.status != Unhealthy && s.failRun >= s.active.UnhealthyThreshold {
			s.status = Unhealthy
		}
	}
	to := s.status
	if from != to {
		s.lastChange = s.lastCheck
	}
	s.usable.Store(to == Healthy || (to == Unknown && s.active.UnknownIsHealthy))
	r := s.reason
	s.mu.Unlock()
	if from != to && s.notify != nil {
		s.notify(Transition{From: from, To: to, Reason: r})
	}
}

// Observe records the outcome of one proxied request (exactly once per
// request). Consecutive failures eject the backend for base × ejections
// (capped) unless the upstream's max_ejection_percent is reached; a success
// resets the run.
func (s *State) Observe(o Outcome, reason string) {
	if o == Neutral {
		return
	}
	if f := o == Failure; s.failing.Load() != f {
		s.failing.Store(f)
	}
	if o == Success && s.strikes.Load() != 0 {
		s.strikes.Store(0)
	}
	if s.passive == nil {
		return
	}
	s.mu.Lock()
	if o == Success {
		s.passiveRun = 0
		if s.ejections > 0 && time.Since(s.ejectedTill) > s.maxEjection() {
			// Well-behaved for a full cap since the last ejection: forget it.
			s.ejections = 0
		}
		s.mu.Unlock()
		return
	}
	s.passiveRun++
	if s.passiveRun < s.passive.ConsecutiveFailures || s.ejected.Load() || s.closed || !s.budget.tryEject(s.passive.MaxEjectionPercent) {
		s.mu.Unlock()
		return
	}
	s.ejections++
	d := min(s.passive.BaseEjectionTime*time.Duration(s.ejections), s.maxEjection())
	s.passiveRun = 0
	s.lastChange = time.Now()
	s.ejectedTill = s.lastChange.Add(d)
	s.ejectedAt.Store(s.lastChange.UnixNano())
	s.ejected.Store(true)
	s.timer = time.AfterFunc(d, s.unEject)
	t := Transition{From: s.status, To: s.status, Ejected: true, Reason: reason, Until: s.ejectedTill}
	s.mu.Unlock()
	if s.notify != nil {
		s.notify(t)
	}
}

// unEject ends an ejection: the backend is eligible again and must earn its
// way out of the next one with fresh consecutive failures.
func (s *State) unEject() {
	s.mu.Lock()
	if !s.ejected.Load() {
		s.mu.Unlock()
		return
	}
	s.ejected.Store(false)
	s.ejectedAt.Store(0)
	s.budget.release()
	s.lastChange = time.Now()
	t := Transition{From: s.status, To: s.status, Returned: true}
	s.mu.Unlock()
	if s.notify != nil {
		s.notify(t)
	}
}

// Close stops the ejection timer and releases the budget; the backend has
// left its upstream.
func (s *State) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.ejected.Load() {
		s.ejected.Store(false)
		s.budget.release()
	}
}

func (s *State) maxEjection() time.Duration {
	if s.passive.MaxEjectionTime > 0 {
		return s.passive.MaxEjectionTime
	}
	return 10 * s.passive.BaseEjectionTime
}

// Inherit takes over old's health for the same backend in an upstream that
// a reload rebuilt (another policy, timeouts or thresholds): a reload must
// never make a backend known to be down eligible again, nor report
// transitions that did not happen. The active status, its runs and the
// time of the last check (the next one is due an interval after it, not at
// once: RunChecks) carry over when both states run active checks; a running ejection carries over,
// ending when it would have, when both track outcomes (its budget share was
// reserved in the old upstream, so it is taken again without a check).
// Call it before the backend is published; old may still be in use.
func (s *State) Inherit(old *State) {
	old.mu.Lock()
	checked := old.active != nil
	status, reason, okRun, failRun, lastCheck := old.status, old.reason, old.okRun, old.failRun, old.lastCheck
	lastOK, lastReason, lastChange := old.lastOK, old.lastReason, old.lastChange
	ejections, till, ejected := old.ejections, old.ejectedTill, old.ejected.Load()
	old.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastChange = lastChange // the same backend: nothing changed
	s.failing.Store(old.failing.Load())
	if s.active != nil && checked {
		s.status, s.reason, s.okRun, s.failRun, s.lastCheck = status, reason, okRun, failRun, lastCheck
		s.lastOK, s.lastReason = lastOK, lastReason
		s.usable.Store(status == Healthy || (status == Unknown && s.active.UnknownIsHealthy))
	}
	if s.passive == nil || s.closed {
		return
	}
	s.ejections = ejections
	if d := time.Until(till); ejected && d > 0 && !s.ejected.Load() {
		if s.budget != nil {
			s.budget.ejected.Add(1)
		}
		s.ejectedTill = till
		s.ejectedAt.Store(old.ejectedAt.Load())
		s.ejected.Store(true)
		s.timer = time.AfterFunc(d, s.unEject)
	}
}

// sinceLastCheck is how long ago the last active-check result was observed;
// ok is false before the first.
func (s *State) sinceLastCheck() (d time.Duration, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastCheck.IsZero() {
		return 0, false
	}
	return time.Since(s.lastCheck), true
}

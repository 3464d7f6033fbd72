package health

import "time"

// Detail is one backend's health as the status page shows it (HAProxy's
// per-server row: status, last check, last change).
type Detail struct {
	Status Status
	// Reason is the canonical reason of the last failure while not healthy.
	Reason string
	// LastCheck is when the last active-check result was observed (zero:
	// none yet, or checks off); LastCheckOK and LastCheckReason are that
	// result ("timeout", "status 503", ...; "" when it passed).
	LastCheck       time.Time
	LastCheckOK     bool
	LastCheckReason string
	// LastChange is the last status change, ejection or return from one;
	// the backend's creation before any.
	LastChange time.Time
	// EjectedUntil is the end of the running ejection (zero: not ejected);
	// Ejections counts the ejections that set its length (base × n).
	EjectedUntil time.Time
	Ejections    int
	// FailRun counts the consecutive failed checks (UnhealthyThreshold
	// of them make the backend unhealthy).
	FailRun int
}

// Detail returns the backend's health for reports.
func (s *State) Detail() Detail {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := Detail{Status: s.status, Reason: s.reason, LastCheck: s.lastCheck, LastCheckOK: s.lastOK,
		LastCheckReason: s.lastReason, LastChange: s.lastChange, Ejections: s.ejections, FailRun: s.failRun}
	if s.ejected.Load() {
		d.EjectedUntil = s.ejectedTill
	}
	return d
}

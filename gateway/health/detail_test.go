package health

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestDetail: the status page's view of a backend's health. The last
// check's result and time follow every check, the last change moves only
// on a status change, an ejection or its end, and a rebuilt state
// (Inherit) keeps all of it.
func TestDetail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		pas := &PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: 10 * time.Second, MaxEjectionPercent: 100}
		s := New(&ActiveConfig{HealthyThreshold: 1, UnhealthyThreshold: 2, UnknownIsHealthy: true}, pas, &Budget{Size: func() int { return 1 }}, nil)
		if d := s.Detail(); !d.LastCheck.IsZero() || !d.LastChange.Equal(start) || d.Status != Unknown {
			t.Fatalf("new: %+v", d)
		}
		time.Sleep(time.Second)
		s.ObserveCheck(true, "")
		changed := time.Now()
		if d := s.Detail(); !d.LastCheck.Equal(changed) || !d.LastCheckOK || d.LastCheckReason != "" || !d.LastChange.Equal(changed) || d.Status != Healthy {
			t.Fatalf("after a pass: %+v", d)
		}
		time.Sleep(time.Second)
		s.ObserveCheck(false, "status 503") // below the threshold: still healthy
		if d := s.Detail(); !d.LastCheck.Equal(time.Now()) || d.LastCheckOK || d.LastCheckReason != "status 503" ||
			!d.LastChange.Equal(changed) || d.Status != Healthy || d.FailRun != 1 {
			t.Fatalf("after one failure: %+v", d)
		}
		time.Sleep(time.Second)
		s.ObserveCheck(false, "timeout")
		down := time.Now()
		if d := s.Detail(); d.Status != Unhealthy || d.Reason != "timeout" || !d.LastChange.Equal(down) || d.FailRun != 2 {
			t.Fatalf("after the threshold: %+v", d)
		}
		time.Sleep(time.Second)
		s.Observe(Failure, "reset")
		ejected := time.Now()
		if d := s.Detail(); !d.EjectedUntil.Equal(ejected.Add(10*time.Second)) || d.Ejections != 1 || !d.LastChange.Equal(ejected) {
			t.Fatalf("ejected: %+v", d)
		}
		r := New(&ActiveConfig{HealthyThreshold: 1, UnhealthyThreshold: 2}, pas, &Budget{Size: func() int { return 1 }}, nil)
		r.Inherit(s)
		s.Close()
		if got, want := r.Detail(), s.Detail(); got.LastCheck != want.LastCheck || got.LastCheckReason != "timeout" ||
			!got.LastChange.Equal(ejected) || !got.EjectedUntil.Equal(ejected.Add(10*time.Second)) {
			t.Fatalf("inherited %+v from %+v", got, want)
		}
		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		if d := r.Detail(); !d.EjectedUntil.IsZero() || !d.LastChange.Equal(ejected.Add(10*time.Second)) {
			t.Fatalf("after the ejection: %+v", d)
		}
		r.Close()
	})
}

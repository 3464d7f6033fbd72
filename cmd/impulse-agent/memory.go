package main

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// gcPercent is the default GOGC: the proxy path allocates short-lived
// objects at a high rate while its live heap is small, and collecting at
// 200% growth instead of 100% cut CPU per request by about 10% in
// `make bench`. GOGC in the environment still wins.
const gcPercent = 200

// setGC applies the default GOGC unless the environment sets one.
func setGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}

// Allocation rates (bytes per second) that mark the process busy and idle.
// 1,000 idle HTTP/3 connections with keep-alives allocate well under idleBelow;
// a burst of handshakes or requests allocates far more than busyAbove.
const (
	busyAbove = 4 << 20
	idleBelow = 1 << 20
)

// idleReclaimer returns memory to the operating system once the process
// goes quiet after a busy period. Under load the heap may grow to three
// times the live data (GOGC=200) and nothing collects it while no one
// allocates: the runtime's own forced GC comes after 2 minutes, and only
// then can the scavenger release the pages. Reclaiming on the first quiet
// second costs one collection per busy period and keeps an idle gateway's
// RSS close to its live data (1,000 idle connections: see README,
// Performance).
type idleReclaimer struct {
	allocs  func() uint64 // cumulative heap bytes allocated
	reclaim func()
	last    uint64
	armed   bool // busy since the last reclaim
}

// tick is called once per second; it reports whether it reclaimed.
func (r *idleReclaimer) tick() bool {
	a := r.allocs()
	d := a - r.last
	r.last = a
	switch {
	case d >= busyAbove:
		r.armed = true
	case d < idleBelow && r.armed:
		r.armed = false
		r.reclaim()
		return true
	}
	return false
}

// heapAllocs reads /gc/heap/allocs:bytes, the cumulative bytes allocated on
// the heap (runtime/metrics).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// reclaimWhenIdle runs an idleReclaimer every second until ctx ends.
func reclaimWhenIdle(ctx context.Context) {
	r := &idleReclaimer{allocs: heapAllocs, reclaim: debug.FreeOSMemory, armed: true}
	r.last = r.allocs()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.tick()
		}
	}
}

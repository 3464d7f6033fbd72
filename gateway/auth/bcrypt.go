package auth

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/crypto/bcrypt"
)

// The bcrypt bound. A bcrypt comparison is a core's work for tens of
// milliseconds (cost 10) to about a second (cost 14, credfile's maximum),
// and every wrong password costs one: without a bound, a handful of
// clients guessing passwords saturate the gateway's cores and every other
// route's latency with them (16 clients took an unrelated route's p50
// from 1.4 ms to 400 ms on a 2-core host). So at most BcryptSlots()
// comparisons run at once in the whole process (every route, listener
// and reload share them), max(1, GOMAXPROCS/2) by default: half the cores
// stay for proxying whatever the guessing rate.
//
// A comparison that finds every slot taken is not run and not queued: the
// request is refused at once with ResultBusy (the pipeline's 429
// auth_busy, Retry-After: 1; gRPC RESOURCE_EXHAUSTED). A queue would
// hold each guess's goroutine and request for as long as the guesses
// ahead of it, so the flood's own latency would grow and a legitimate
// first login would wait behind it just the same; an immediate 429 costs
// nothing, and the client retries after a second. A credential verified
// within VerifiedTTL is answered from the cache and needs no slot: users
// already logged in are not affected by a flood.

// slots bounds the comparisons running at once; inflight and peak count
// them (BcryptStats).
var (
	slotsMu  sync.Mutex
	slots    = make(chan struct{}, DefaultBcryptSlots())
	inflight atomic.Int64
	peak     atomic.Int64
)

// DefaultBcryptSlots is max(1, GOMAXPROCS/2), the bound of concurrent
// bcrypt comparisons.
func DefaultBcryptSlots() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// BcryptSlots is the current bound of concurrent bcrypt comparisons.
func BcryptSlots() int {
	slotsMu.Lock()
	defer slotsMu.Unlock()
	return cap(slots)
}

// SetBcryptSlots sets the bound to n (≥ 1) and resets the peak; it
// returns a function restoring the previous bound. Comparisons running
// meanwhile release the slot they took. For tests, which need a bound
// that does not depend on the host's cores.
func SetBcryptSlots(n int) (restore func()) {
	slotsMu.Lock()
	defer slotsMu.Unlock()
	old := slots
	slots = make(chan struct{}, max(1, n))
	peak.Store(0)
	return func() {
		slotsMu.Lock()
		slots = old
		slotsMu.Unlock()
	}
}

// BcryptStats is the number of bcrypt comparisons running now and the
// most that ever ran at once since the start (or the last
// SetBcryptSlots): the evidence that the bound holds.
func BcryptStats() (running, most int64) { return inflight.Load(), peak.Load() }

// beforeCompare, when set (tests of this package), runs in every
// comparison while it holds its slot.
var beforeCompare func()

// BeforeCompareHook sets a function every bcrypt comparison calls while
// it holds its slot, before comparing (nil: none), and returns one
// restoring the previous. For tests that must hold a slot to see the
// refusal of the next comparison without depending on timing.
func BeforeCompareHook(f func()) (restore func()) {
	slotsMu.Lock()
	defer slotsMu.Unlock()
	old := beforeCompare
	beforeCompare = f
	return func() {
		slotsMu.Lock()
		beforeCompare = old
		slotsMu.Unlock()
	}
}

// compare checks password against hash within the bound: ResultOK or
// ResultDenied, ResultBusy when every slot is taken (nothing compared),
// ResultCanceled when ctx ends first. The comparison itself cannot be
// interrupted; it runs in its own goroutine, which keeps the slot until
// it ends (at most about a second at cost 14), so that a client leaving,
// or a shutdown canceling the request, never waits for it.
func compare(ctx context.Context, hash []byte, password string) string {
	slotsMu.Lock()
	sem, hook := slots, beforeCompare
	slotsMu.Unlock()
	select {
	case sem <- struct{}{}:
	default:
		return ResultBusy
	}
	n := inflight.Add(1)
	for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
	}
	done := make(chan bool, 1)
	go func() {
		if hook != nil {
			hook()
		}
		ok := bcrypt.CompareHashAndPassword(hash, []byte(password)) == nil
		// Free before answering: a client's next request, sent once it has
		// this answer, finds the slot free.
		inflight.Add(-1)
		<-sem
		done <- ok
	}()
	select {
	case ok := <-done:
		if ok {
			return ResultOK
		}
		return ResultDenied
	case <-ctx.Done():
		return ResultCanceled
	}
}

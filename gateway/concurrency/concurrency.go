// Package concurrency holds the concurrency-limit policy of the admission
// chain (architecture.md "Request pipeline"): a counting semaphore of
// in-flight requests with a bounded FIFO queue of waiters (Limiter), and
// the pure decision it takes for each arrival (Decide).
//
// It is the gateway's `limits { max_requests max_queue queue_timeout }`
// of an upstream and the top-level `limits { max_requests }`; the
// per-backend cap lives with the backends (upstream.Backend.TryAcquire).
// The semantics follow Envoy's circuit-breaker thresholds (max_requests:
// a request over the limit fails at once, never waits behind a slow
// backend) with an optional, bounded wait in line, as in HAProxy's
// maxconn + maxqueue + timeout queue.
package concurrency

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Decision is what Decide says about one arrival.
type Decision int

// Decisions.
const (
	// Admit: a slot is free and nobody waits for one; the request runs.
	Admit Decision = iota
	// Queue: every slot is taken (or others already wait, who go first)
	// and the queue has room; the request waits in line.
	Queue
	// Reject: every slot is taken and the queue is full (or there is
	// none); the request is overloaded.
	Reject
)

func (d Decision) String() string {
	switch d {
	case Admit:
		return "admit"
	case Queue:
		return "queue"
	}
	return "reject"
}

// Decide is the admission decision for one arrival, given inFlight
// requests holding a slot, max slots (≤ 0: no limit), waiting requests in
// line and maxQueue places in the line (≤ 0: no line). An arrival never
// overtakes a waiter (FIFO): with anyone waiting it queues even if a slot
// has just been freed (the waiter at the head gets it).
func Decide(inFlight, max, waiting, maxQueue int64) Decision {
	switch {
	case max <= 0:
		return Admit
	case inFlight < max && waiting == 0:
		return Admit
	case waiting < maxQueue:
		return Queue
	}
	return Reject
}

// Limits configure a Limiter. The zero value limits nothing.
type Limits struct {
	// Max is the number of requests that may hold a slot at once; ≤ 0
	// means no limit (requests are still counted, for InFlight).
	Max int
	// MaxQueue is how many requests may wait for a slot, in arrival order,
	// when all Max are taken; ≤ 0 means none (over the limit, at once
	// ErrFull). It has no effect without Max.
	MaxQueue int
	// QueueTimeout is the longest a request waits in the queue before
	// ErrQueueTimeout; ≤ 0 means it waits until a slot frees or its
	// context ends.
	QueueTimeout time.Duration
}

// Errors of Acquire. Both mean "overloaded".
var (
	// ErrFull: every slot is taken and the queue is full or absent.
	ErrFull = errors.New("concurrency: limit reached")
	// ErrQueueTimeout: the request waited QueueTimeout for a slot.
	ErrQueueTimeout = errors.New("concurrency: queue timeout")
)

// Limiter counts requests in flight against Limits. Every successful
// TryAcquire or Acquire is paired with one Release. A nil *Limiter limits
// and counts nothing: every method is a no-op that admits.
//
// When no request waits, acquiring and releasing are lock-free (a
// compare-and-swap each; no allocation). Waiters are kept in a FIFO list
// under a mutex; a Release hands its slot to the head of the line. Safe
// for concurrent use.
type Limiter struct {
	max, maxQueue, timeout atomic.Int64 // Limits, changed by Set
	inFlight               atomic.Int64 // slots held
	waiting                atomic.Int64 // len of the queue, read without mu

	mu   sync.Mutex // guards the queue
	head *waiter
	tail *waiter
}

// waiter is one request waiting in line.
type waiter struct {
	prev, next *waiter
	ready      chan struct{} // closed when state leaves waiting
	state      int           // under mu: waiting, granted or evicted
}

const (
	waiting = iota
	granted
	evicted
)

// New returns a Limiter with limits l.
func New(l Limits) *Limiter {
	lim := &Limiter{}
	lim.Set(l)
	return lim
}

// Set switches to l at once; the requests holding a slot keep it. A
// larger Max admits waiters now; a smaller MaxQueue turns the newest
// waiters beyond it away (ErrFull), so the line never exceeds it.
func (l *Limiter) Set(lim Limits) {
	l.max.Store(int64(max(lim.Max, 0)))
	l.maxQueue.Store(int64(max(lim.MaxQueue, 0)))
	l.timeout.Store(int64(max(lim.QueueTimeout, 0)))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.grantLocked()
	keep := l.maxQueue.Load()
	if l.max.Load() <= 0 {
		keep = 0 // grantLocked admitted them all
	}
	for l.waiting.Load() > keep {
		w := l.tail
		l.unlink(w)
		w.state = evicted
		close(w.ready)
	}
}

// Limits returns the limits in force.
func (l *Limiter) Limits() Limits {
	if l == nil {
		return Limits{}
	}
	return Limits{Max: int(l.max.Load()), MaxQueue: int(l.maxQueue.Load()), QueueTimeout: time.Duration(l.timeout.Load())}
}

// InFlight is the number of slots held now.
func (l *Limiter) InFlight() int64 {
	if l == nil {
		return 0
	}
	return l.inFlight.Load()
}

// Waiting is the number of requests in the queue now (≤ MaxQueue).
func (l *Limiter) Waiting() int64 {
	if l == nil {
		return 0
	}
	return l.waiting.Load()
}

// TryAcquire takes a slot if one is free and nobody waits, without
// waiting; it reports whether it did.
func (l *Limiter) TryAcquire() bool {
	if l == nil {
		return true
	}
	for {
		n := l.inFlight.Load()
		if Decide(n, l.max.Load(), l.waiting.Load(), 0) != Admit {
			return false
		}
		if l.inFlight.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// Acquire takes a slot, waiting in line for one when Decide says Queue:
// until a Release hands one over, QueueTimeout passes (ErrQueueTimeout)
// or ctx ends (ctx.Err()); a request that stops waiting leaves the line
// at once. Over the limit with no room in line it returns ErrFull without
// waiting. Only nil means the caller holds a slot (and must Release it).
func (l *Limiter) Acquire(ctx context.Context) error {
	for {
		if l.TryAcquire() {
			return nil
		}
		l.mu.Lock() // waiting changes only under mu: the line's bound is exact
		d := Decide(l.inFlight.Load(), l.max.Load(), l.waiting.Load(), l.maxQueue.Load())
		if d == Queue {
			break // with mu held
		}
		l.mu.Unlock()
		if d == Reject {
			return ErrFull
		}
		// Admit: a slot was freed since TryAcquire; try again for it.
	}
	w := &waiter{ready: make(chan struct{})}
	l.push(w)
	// A Release that ran between TryAcquire and push saw nobody waiting
	// and kept its slot free: hand it over now. (A Release decrements
	// inFlight before it looks at waiting, push increments waiting before
	// this looks at inFlight: one of the two sees the other.)
	l.grantLocked()
	l.mu.Unlock()

	var timeout <-chan time.Time
	if d := time.Duration(l.timeout.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	var err error
	select {
	case <-w.ready:
	case <-ctx.Done():
		err = ctx.Err()
	case <-timeout:
		err = ErrQueueTimeout
	}
	l.mu.Lock()
	state := w.state
	if state == waiting {
		l.unlink(w)
	}
	l.mu.Unlock()
	switch {
	case state == evicted:
		return ErrFull
	case state == granted && ctx.Err() != nil:
		l.Release() // handed over as the client left: not needed
		return ctx.Err()
	case state == granted:
		return nil // a slot, even if the timer fired at the same moment
	}
	return err
}

// Release frees a slot taken by TryAcquire or Acquire, handing it to the
// first waiter if any.
func (l *Limiter) Release() {
	if l == nil {
		return
	}
	l.inFlight.Add(-1)
	if l.waiting.Load() > 0 {
		l.mu.Lock()
		l.grantLocked()
		l.mu.Unlock()
	}
}

// grantLocked gives free slots to waiters, first come first served.
// Callers hold mu.
func (l *Limiter) grantLocked() {
	for l.head != nil {
		n := l.inFlight.Load()
		if m := l.max.Load(); m > 0 && n >= m {
			return
		}
		if !l.inFlight.CompareAndSwap(n, n+1) {
			continue // a lock-free TryAcquire took it, or a Release freed one
		}
		w := l.head
		l.unlink(w)
		w.state = granted
		close(w.ready)
	}
}

// push appends w to the line. Callers hold mu.
func (l *Limiter) push(w *waiter) {
	w.prev = l.tail
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.waiting.Add(1)
}

// unlink removes w from the line. Callers hold mu.
func (l *Limiter) unlink(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	l.waiting.Add(-1)
}

package concurrency

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		inFlight, max, waiting, maxQueue int64
		want                             Decision
	}{
		{0, 0, 0, 0, Admit},    // no limit
		{1000, 0, 5, 0, Admit}, // no limit, whatever the counts
		{0, 1, 0, 0, Admit},    // a free slot
		{9, 10, 0, 0, Admit},   // the last free slot
		{10, 10, 0, 0, Reject}, // full, no queue
		{10, 10, 0, 5, Queue},  // full, room in line
		{10, 10, 4, 5, Queue},  // the last place in line
		{10, 10, 5, 5, Reject}, // the line is full
		{9, 10, 1, 5, Queue},   // a slot just freed, but someone waits for it: FIFO
		{9, 10, 5, 5, Reject},  // likewise, and the line is full
		{11, 10, 0, 0, Reject}, // over (a lowered Max): nobody new until it drains
		{0, 1, 0, -1, Admit},   // a negative queue is none
		{1, 1, 0, -1, Reject},  //
		{3, -1, 0, 0, Admit},   // a negative max is no limit
		{10, 10, 6, 5, Reject}, // more waiting than allowed (a lowered MaxQueue)
		{0, 10, 2, 5, Queue},   // free slots with waiters: they are being handed over
		{10, 10, 0, 1 << 40, Queue},
	} {
		if got := Decide(tc.inFlight, tc.max, tc.waiting, tc.maxQueue); got != tc.want {
			t.Errorf("Decide(inFlight %d, max %d, waiting %d, maxQueue %d) = %v, want %v", tc.inFlight, tc.max, tc.waiting, tc.maxQueue, got, tc.want)
		}
	}
}

// TestNilLimiter: a nil *Limiter admits and counts nothing.
func TestNilLimiter(t *testing.T) {
	var l *Limiter
	if !l.TryAcquire() || l.Acquire(context.Background()) != nil {
		t.Fatal("nil limiter refused")
	}
	l.Release()
	if l.InFlight() != 0 || l.Waiting() != 0 || l.Limits() != (Limits{}) {
		t.Fatal("nil limiter counts")
	}
}

// TestNoLimit: Max 0 admits everything and still counts.
func TestNoLimit(t *testing.T) {
	l := New(Limits{})
	for range 100 {
		if err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if l.InFlight() != 100 {
		t.Fatalf("in flight %d, want 100", l.InFlight())
	}
	for range 100 {
		l.Release()
	}
	if l.InFlight() != 0 {
		t.Fatalf("in flight %d after releases", l.InFlight())
	}
}

// TestFailFast: without a queue the request over the limit is refused at
// once, and a released slot is taken again.
func TestFailFast(t *testing.T) {
	l := New(Limits{Max: 2})
	ctx := context.Background()
	if l.Acquire(ctx) != nil || !l.TryAcquire() {
		t.Fatal("first two refused")
	}
	start := time.Now()
	if err := l.Acquire(ctx); !errors.Is(err, ErrFull) {
		t.Fatalf("third: %v, want ErrFull", err)
	}
	if l.TryAcquire() {
		t.Fatal("TryAcquire over the limit")
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Fatalf("refusal took %v", d)
	}
	l.Release()
	if !l.TryAcquire() {
		t.Fatal("freed slot not taken")
	}
	if l.InFlight() != 2 || l.Waiting() != 0 {
		t.Fatalf("in flight %d, waiting %d", l.InFlight(), l.Waiting())
	}
}

// acquireAsync starts Acquire on a goroutine and waits until the limiter
// counts wantWaiting waiters (or the call returned).
func acquireAsync(t *testing.T, l *Limiter, ctx context.Context, wantWaiting int64) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- l.Acquire(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for l.Waiting() < wantWaiting {
		select {
		case err := <-done:
			done <- err
			return done
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %d, want %d", l.Waiting(), wantWaiting)
		}
		time.Sleep(time.Millisecond)
	}
	return done
}

// TestQueueFIFO: waiters are served in arrival order, one per Release; the
// line never grows past MaxQueue, the next arrival is refused at once.
func TestQueueFIFO(t *testing.T) {
	l := New(Limits{Max: 1, MaxQueue: 3, QueueTimeout: time.Minute})
	ctx := context.Background()
	if !l.TryAcquire() {
		t.Fatal("first refused")
	}
	var waiters []<-chan error
	for i := range 3 {
		waiters = append(waiters, acquireAsync(t, l, ctx, int64(i+1)))
	}
	if err := l.Acquire(ctx); !errors.Is(err, ErrFull) {
		t.Fatalf("fifth: %v, want ErrFull (line full)", err)
	}
	if l.Waiting() != 3 {
		t.Fatalf("waiting %d, want 3", l.Waiting())
	}
	for i, w := range waiters {
		select {
		case err := <-w:
			t.Fatalf("waiter %d returned early: %v", i, err)
		default:
		}
		l.Release() // the holder (or the previous waiter) is done
		if err := <-w; err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
		for j, later := range waiters[i+1:] {
			select {
			case err := <-later:
				t.Fatalf("waiter %d served before waiter %d: %v", i+1+j, i, err)
			default:
			}
		}
		if l.InFlight() != 1 {
			t.Fatalf("in flight %d, want 1", l.InFlight())
		}
	}
	l.Release()
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Fatalf("in flight %d, waiting %d", l.InFlight(), l.Waiting())
	}
}

// TestQueueTimeout: a waiter gives up after QueueTimeout and leaves the
// line; the slot it never got stays with its holder.
func TestQueueTimeout(t *testing.T) {
	l := New(Limits{Max: 1, MaxQueue: 1, QueueTimeout: 30 * time.Millisecond})
	if !l.TryAcquire() {
		t.Fatal("first refused")
	}
	start := time.Now()
	err := l.Acquire(context.Background())
	if !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("got %v, want ErrQueueTimeout", err)
	}
	if d := time.Since(start); d < 30*time.Millisecond || d > 2*time.Second {
		t.Fatalf("waited %v for a 30ms timeout", d)
	}
	if l.Waiting() != 0 || l.InFlight() != 1 {
		t.Fatalf("waiting %d, in flight %d", l.Waiting(), l.InFlight())
	}
	l.Release()
	if l.InFlight() != 0 {
		t.Fatalf("in flight %d", l.InFlight())
	}
}

// TestQueueCancel: a waiter whose context ends leaves the line at once
// (no leak), and the next Release goes to the one behind it.
func TestQueueCancel(t *testing.T) {
	l := New(Limits{Max: 1, MaxQueue: 2, QueueTimeout: time.Minute})
	if !l.TryAcquire() {
		t.Fatal("first refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := acquireAsync(t, l, ctx, 1)
	next := acquireAsync(t, l, context.Background(), 2)
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled waiter: %v", err)
	}
	if l.Waiting() != 1 {
		t.Fatalf("waiting %d after cancel, want 1", l.Waiting())
	}
	l.Release()
	if err := <-next; err != nil {
		t.Fatalf("next waiter: %v", err)
	}
	l.Release()
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Fatalf("in flight %d, waiting %d", l.InFlight(), l.Waiting())
	}
}

// TestSet: a larger Max admits waiters, a smaller MaxQueue turns the
// newest away, Max 0 admits everyone; holders keep their slots.
func TestSet(t *testing.T) {
	ctx := context.Background()
	l := New(Limits{Max: 1, MaxQueue: 3, QueueTimeout: time.Minute})
	l.TryAcquire()
	w1 := acquireAsync(t, l, ctx, 1)
	w2 := acquireAsync(t, l, ctx, 2)
	w3 := acquireAsync(t, l, ctx, 3)

	l.Set(Limits{Max: 2, MaxQueue: 3, QueueTimeout: time.Minute})
	if err := <-w1; err != nil {
		t.Fatalf("w1 after Max 2: %v", err)
	}
	l.Set(Limits{Max: 2, MaxQueue: 1, QueueTimeout: time.Minute})
	if err := <-w3; !errors.Is(err, ErrFull) {
		t.Fatalf("w3 after MaxQueue 1: %v, want ErrFull", err)
	}
	if l.Waiting() != 1 || l.InFlight() != 2 {
		t.Fatalf("waiting %d, in flight %d", l.Waiting(), l.InFlight())
	}
	l.Set(Limits{})
	if err := <-w2; err != nil {
		t.Fatalf("w2 after no limit: %v", err)
	}
	if got := l.Limits(); got != (Limits{}) {
		t.Fatalf("Limits() = %+v", got)
	}
	for range 3 {
		l.Release()
	}
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Fatalf("in flight %d, waiting %d", l.InFlight(), l.Waiting())
	}
	l.Set(Limits{Max: 1})
	if !l.TryAcquire() || l.TryAcquire() {
		t.Fatal("Max 1 after Set")
	}
}

// TestConcurrentNeverOver: under contention no more than Max hold a slot,
// the line stays within MaxQueue, and everything returns to zero.
func TestConcurrentNeverOver(t *testing.T) {
	const max, maxQueue = 4, 8
	l := New(Limits{Max: max, MaxQueue: maxQueue, QueueTimeout: 50 * time.Millisecond})
	var holding, peak, peakQueue atomic.Int64
	var ok, refused atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 200 {
				ctx := context.Background()
				var cancel context.CancelFunc = func() {}
				if (g+i)%7 == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(i%3)*time.Millisecond)
				}
				err := l.Acquire(ctx)
				cancel()
				if q := l.Waiting(); q > peakQueue.Load() {
					peakQueue.Store(q)
				}
				if err != nil {
					refused.Add(1)
					continue
				}
				ok.Add(1)
				n := holding.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				if i%5 == 0 {
					time.Sleep(50 * time.Microsecond)
				}
				holding.Add(-1)
				l.Release()
			}
		})
	}
	wg.Wait()
	if peak.Load() > max {
		t.Errorf("%d held a slot at once, max %d", peak.Load(), max)
	}
	if peakQueue.Load() > maxQueue {
		t.Errorf("%d waited at once, max %d", peakQueue.Load(), maxQueue)
	}
	if l.InFlight() != 0 || l.Waiting() != 0 {
		t.Errorf("in flight %d, waiting %d at the end", l.InFlight(), l.Waiting())
	}
	if ok.Load() == 0 {
		t.Error("nothing admitted")
	}
	t.Logf("admitted %d, refused %d", ok.Load(), refused.Load())
}

// TestNoAllocUnderLimit: acquiring and releasing below the limit (and
// with no limit) does not allocate.
func TestNoAllocUnderLimit(t *testing.T) {
	ctx := context.Background()
	for _, l := range []*Limiter{nil, New(Limits{}), New(Limits{Max: 10, MaxQueue: 10, QueueTimeout: time.Second})} {
		if n := testing.AllocsPerRun(1000, func() {
			if l.Acquire(ctx) == nil {
				l.Release()
			}
		}); n != 0 {
			t.Errorf("%v allocations per acquire and release (limits %+v)", n, l.Limits())
		}
	}
}

// BenchmarkLimiter is the cost of one request's Acquire and Release when
// the limit is off (nil), counting only (Max 0) and not reached.
func BenchmarkLimiter(b *testing.B) {
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		l    *Limiter
	}{
		{"nil", nil},
		{"nolimit", New(Limits{})},
		{"under", New(Limits{Max: 1 << 20, MaxQueue: 10, QueueTimeout: time.Second})},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if bc.l.Acquire(ctx) == nil {
						bc.l.Release()
					}
				}
			})
		})
	}
}

package discovery

// The generic loop and the backoff, on a fake clock (testing/synctest): no
// network, no sleeps.

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
)

func TestNextIndex(t *testing.T) {
	for _, tc := range []struct {
		sent, got, next uint64
		reset           bool
	}{
		{0, 5, 5, false},       // first read
		{5, 5, 5, false},       // same index: no change, block on it again
		{5, 9, 9, false},       // moved forward
		{5000, 4200, 0, true},  // went backwards: full read next
		{0, 0, 1, true},        // index 0: never block on 0
		{1, 0, 1, true},        // still 0: stay on 1 (the rate limit bounds the loop)
		{5000, 0, 1, true},     // 0 after a high index: 1 is also a full read
		{0, 4300, 4300, false}, // after a reset
	} {
		next, reset := nextIndex(tc.sent, tc.got)
		if next != tc.next || reset != tc.reset {
			t.Errorf("nextIndex(%d, %d) = %d, %v; want %d, %v", tc.sent, tc.got, next, reset, tc.next, tc.reset)
		}
	}
}

func TestBackoffDelay(t *testing.T) {
	lo := backoff{min: 250 * time.Millisecond, max: 30 * time.Second, jitter: func(int64) int64 { return 0 }}
	hi := lo
	hi.jitter = func(n int64) int64 { return n }
	for _, tc := range []struct {
		attempt int
		d       time.Duration // un-jittered delay
	}{{1, 250 * time.Millisecond}, {2, 500 * time.Millisecond}, {3, time.Second}, {8, 30 * time.Second}, {1000, 30 * time.Second}} {
		if got := lo.delay(tc.attempt); got != tc.d-tc.d/2 {
			t.Errorf("attempt %d: low jitter %s, want %s", tc.attempt, got, tc.d-tc.d/2)
		}
		if got := hi.delay(tc.attempt); got != tc.d {
			t.Errorf("attempt %d: high jitter %s, want %s", tc.attempt, got, tc.d)
		}
	}
	real := backoff{min: time.Second, max: 4 * time.Second}
	for range 1000 {
		if d := real.delay(3); d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("jittered delay %s outside [2s, 4s]", d)
		}
	}
}

// call is one fetch the fake saw.
type call struct {
	at    time.Time
	index uint64
}

// scriptedLoop builds a loop over a fake fetch answering from script; it
// records calls, changes and failures.
type scriptedLoop struct {
	calls    []call
	changed  []uint64
	resyncs  []uint64 // changed indexes flagged resync
	resets   [][2]uint64
	failures int
	loop     *blockingLoop[int]
}

func newScriptedLoop(limit rate.Limit, burst int, script func(n int) (uint64, error)) *scriptedLoop {
	s := &scriptedLoop{}
	s.loop = &blockingLoop[int]{
		fetch: func(ctx context.Context, index uint64, _ time.Duration) (int, uint64, error) {
			s.calls = append(s.calls, call{time.Now(), index})
			got, err := script(len(s.calls) - 1)
			return 0, got, err
		},
		limiter: rate.NewLimiter(limit, burst),
		backoff: backoff{min: time.Second, max: 8 * time.Second},
		wait:    func() time.Duration { return time.Minute },
		changed: func(_ int, index uint64, resync bool) {
			s.changed = append(s.changed, index)
			if resync {
				s.resyncs = append(s.resyncs, index)
			}
		},
		unchanged: func(uint64) {},
		reset:     func(sent, got uint64) { s.resets = append(s.resets, [2]uint64{sent, got}) },
		failed:    func(error, int, time.Duration) { s.failures++ },
	}
	return s
}

// TestLoopBackoffGrowsCapsAndResets: errors back off 1, 2, 4, 8, 8 s (each
// jittered into [d/2, d]), a success resets the backoff and the index, and
// the first query after an error is a non-blocking read.
func TestLoopBackoffGrowsCapsAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errDown := errors.New("down")
		ctx, cancel := context.WithCancel(t.Context())
		s := newScriptedLoop(rate.Inf, 1, func(n int) (uint64, error) {
			switch {
			case n == 0:
				return 10, nil
			case n <= 5:
				return 0, errDown
			case n == 6:
				return 20, nil
			case n == 7:
				return 0, errDown
			case n == 8:
				return 21, nil
			default:
				cancel()
				return 0, context.Canceled
			}
		})
		if err := s.loop.run(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("run returned %v", err)
		}
		wantIdx := []uint64{0, 10, 0, 0, 0, 0, 0, 20, 0, 21}
		for i, c := range s.calls {
			if c.index != wantIdx[i] {
				t.Fatalf("call %d index %d, want %d (all: %+v)", i, c.index, wantIdx[i], s.calls)
			}
		}
		// Gap before call i+1 follows the failure of call i.
		caps := map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 8 * time.Second, 7: time.Second}
		for i, d := range caps {
			gap := s.calls[i+1].at.Sub(s.calls[i].at)
			if gap < d/2 || gap > d {
				t.Errorf("gap after failure of call %d: %s, want within [%s, %s]", i, gap, d/2, d)
			}
		}
		if s.failures != 6 || len(s.changed) != 3 {
			t.Fatalf("failures %d changed %v", s.failures, s.changed)
		}
		// Both recoveries are resyncs; neither index went backwards.
		if !slices.Equal(s.resyncs, []uint64{20, 21}) || len(s.resets) != 0 {
			t.Fatalf("resyncs %v resets %v", s.resyncs, s.resets)
		}
	})
}

// TestLoopResetAcrossFailures: a reply after failures whose index is below the
// last good one is a reset (a restarted dev agent) although the query itself
// was a read at index 0; a backwards index without failures is one too.
func TestLoopResetAcrossFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		s := newScriptedLoop(rate.Inf, 1, func(n int) (uint64, error) {
			switch n {
			case 0:
				return 50, nil
			case 1:
				return 0, errors.New("down")
			case 2:
				return 11, nil // restarted: lower index
			case 3:
				return 12, nil
			case 4:
				return 5, nil // backwards again, no failure
			default:
				cancel()
				return 0, context.Canceled
			}
		})
		if err := s.loop.run(ctx); !errors.Is(err, context.Canceled) {
			t.Fatalf("run returned %v", err)
		}
		if want := [][2]uint64{{50, 11}, {12, 5}}; !slices.Equal(s.resets, want) {
			t.Fatalf("resets %v, want %v", s.resets, want)
		}
		if want := []uint64{11, 5}; !slices.Equal(s.resyncs, want) {
			t.Fatalf("resyncs %v, want %v (changed %v)", s.resyncs, want, s.changed)
		}
		// After the reset at 11 the loop blocks on 11, not on 50.
		if got := s.calls[3].index; got != 11 {
			t.Fatalf("query after the reset sent index %d", got)
		}
	})
}

// TestLoopRateLimited: a Consul answering at once (index 0 every time) is
// queried at the token-bucket rate, not in a hot loop.
func TestLoopRateLimited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		s := newScriptedLoop(DefaultRate, DefaultBurst, func(int) (uint64, error) { return 0, nil })
		if err := s.loop.run(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("run returned %v", err)
		}
		// burst + rate × 10 s, the last token landing exactly on the deadline.
		if n := len(s.calls); n < 20 || n > DefaultBurst+20 {
			t.Fatalf("%d calls in 10 s at %v/s burst %d", n, DefaultRate, DefaultBurst)
		}
	})
}

// TestLoopStopsDuringBackoff: cancelling while the loop sleeps between retries
// returns at once.
func TestLoopStopsDuringBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		s := newScriptedLoop(rate.Inf, 1, func(int) (uint64, error) { return 0, errors.New("down") })
		s.loop.backoff = backoff{min: time.Hour, max: time.Hour}
		done := make(chan error)
		go func() { done <- s.loop.run(ctx) }()
		synctest.Wait() // the loop is asleep in its backoff
		start := time.Now()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("run returned %v", err)
		}
		if d := time.Since(start); d != 0 || len(s.calls) != 1 {
			t.Fatalf("returned after %s with %d calls", d, len(s.calls))
		}
	})
}

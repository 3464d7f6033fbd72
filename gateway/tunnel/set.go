package tunnel

import (
	"context"
	"sync"
	"time"
)

// Set is a listener's open tunnels: a drain waits for them (net/http
// forgets a hijacked connection) and, at its deadline, closes them with a
// close frame where it can. It owns nothing but the membership.
type Set struct {
	mu      sync.Mutex
	open    map[*Tunnel]struct{}
	changed chan struct{} // a tunnel ended; capacity 1
}

// setKey is the context key of a listener's *Set: the TCP server's base
// context and each QUIC connection's context carry it (WithSet).
type setKey struct{}

// WithSet returns ctx carrying s, the set of the listener a request on it
// comes in on.
func WithSet(ctx context.Context, s *Set) context.Context { return context.WithValue(ctx, setKey{}, s) }

// SetOf is the set of the listener a request came in on (its context's);
// nil for a request served without a listener (Gateway.Handler): its
// tunnels are not tracked.
func SetOf(ctx context.Context) *Set {
	s, _ := ctx.Value(setKey{}).(*Set)
	return s
}

func (s *Set) add(t *Tunnel) {
	s.mu.Lock()
	if s.open == nil {
		s.open = map[*Tunnel]struct{}{}
		s.changed = make(chan struct{}, 1)
	}
	s.open[t] = struct{}{}
	s.mu.Unlock()
}

func (s *Set) remove(t *Tunnel) {
	s.mu.Lock()
	delete(s.open, t)
	ch := s.changed
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Count is the number of open tunnels.
func (s *Set) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// Wait returns when no tunnel is open or ctx is done.
func (s *Set) Wait(ctx context.Context) { s.waitFor(ctx, nil) }

// countOf is the number of open tunnels match selects (nil: all).
func (s *Set) countOf(match func(*Tunnel) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if match == nil {
		return len(s.open)
	}
	n := 0
	for t := range s.open {
		if match(t) {
			n++
		}
	}
	return n
}

// waitFor returns when no tunnel match selects (nil: any) is open, or ctx
// is done.
func (s *Set) waitFor(ctx context.Context, match func(*Tunnel) bool) {
	for s.countOf(match) > 0 {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// CloseGrace is how long closed tunnels get for their close
// handshake (the peers' close frames, the last bytes reaching the
// sockets) before the connections under them are cut.
const CloseGrace = time.Second

// CloseAll ends every open tunnel at the drain deadline, sending WebSocket
// close frames (1001, going away) where a frame boundary allows, and waits
// for them to end, at most CloseGrace. It reports whether there
// were any.
func (s *Set) CloseAll() bool { return s.End(CloseGrace, nil) }

// CutAll ends every open tunnel at once (the forced stop), close frames
// sent where they can be, without waiting.
func (s *Set) CutAll() { s.End(0, nil) }

// End ends the tunnels match selects (nil: all) as CloseAll does, with
// grace (0: at once, without waiting).
func (s *Set) End(grace time.Duration, match func(*Tunnel) bool) bool {
	s.mu.Lock()
	ts := make([]*Tunnel, 0, len(s.open))
	for t := range s.open {
		if match == nil || match(t) {
			ts = append(ts, t)
		}
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.drain(grace)
	}
	if len(ts) == 0 || grace <= 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	s.waitFor(ctx, match)
	return true
}

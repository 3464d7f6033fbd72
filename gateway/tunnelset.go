package gateway

import (
	"context"
	"sync"
	"time"
)

// tunnelSet is a listener's open tunnels: a drain waits for them (net/http
// forgets a hijacked connection) and, at its deadline, closes them with a
// close frame where it can. It owns nothing but the membership.
type tunnelSet struct {
	mu      sync.Mutex
	open    map[*tunnel]struct{}
	changed chan struct{} // a tunnel ended; capacity 1
}

// tunnelsKey is the context key of the listener's *tunnelSet: the TCP
// server's base context and each QUIC connection's context carry it.
type tunnelsKey struct{}

// tunnelsOf is the set of the listener r came in on; nil for a request
// served through Gateway.Handler (no listener: tunnels are not tracked).
func tunnelsOf(ctx context.Context) *tunnelSet {
	s, _ := ctx.Value(tunnelsKey{}).(*tunnelSet)
	return s
}

func (s *tunnelSet) add(t *tunnel) {
	s.mu.Lock()
	if s.open == nil {
		s.open = map[*tunnel]struct{}{}
		s.changed = make(chan struct{}, 1)
	}
	s.open[t] = struct{}{}
	s.mu.Unlock()
}

func (s *tunnelSet) remove(t *tunnel) {
	s.mu.Lock()
	delete(s.open, t)
	ch := s.changed
	s.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

// count is the number of open tunnels.
func (s *tunnelSet) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// wait returns when no tunnel is open or ctx is done.
func (s *tunnelSet) wait(ctx context.Context) { s.waitFor(ctx, nil) }

// countOf is the number of open tunnels match selects (nil: all).
func (s *tunnelSet) countOf(match func(*tunnel) bool) int {
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
func (s *tunnelSet) waitFor(ctx context.Context, match func(*tunnel) bool) {
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

// tunnelCloseGrace is how long closed tunnels get for their close
// handshake (the peers' close frames, the last bytes reaching the
// sockets) before the connections under them are cut.
const tunnelCloseGrace = time.Second

// closeAll ends every open tunnel at the drain deadline, sending WebSocket
// close frames (1001, going away) where a frame boundary allows, and waits
// for them to end, at most tunnelCloseGrace. It reports whether there
// were any.
func (s *tunnelSet) closeAll() bool { return s.end(tunnelCloseGrace, nil) }

// cutAll ends every open tunnel at once (the forced stop), close frames
// sent where they can be, without waiting.
func (s *tunnelSet) cutAll() { s.end(0, nil) }

// end ends the tunnels match selects (nil: all) as closeAll does, with
// grace (0: at once, without waiting).
func (s *tunnelSet) end(grace time.Duration, match func(*tunnel) bool) bool {
	s.mu.Lock()
	ts := make([]*tunnel, 0, len(s.open))
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

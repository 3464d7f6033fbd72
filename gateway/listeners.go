package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/ingress"
)

// The gateway's listeners (gateway/ingress): started, reconfigured and
// stopped under g.mu, each handing its requests to the pipeline.

// pipeline is the gateway as the ingresses see it: where requests go.
type pipeline struct{ g *Gateway }

// Serve implements ingress.Pipeline: r runs on a warm worker (workers.go).
func (p pipeline) Serve(listener string, w http.ResponseWriter, r *http.Request, refused answer.Answer) {
	p.g.workers.run(p.g, listener, w, r, refused)
}

// ingressDeps are what every listener of g shares.
func (g *Gateway) ingressDeps() ingress.Deps {
	return ingress.Deps{Pipeline: pipeline{g}, Log: g.log, QUICLog: g.qlog, Metrics: g.obs.Metrics, Drains: &g.drains}
}

// Start binds every listener of cfg that is not running yet. It is the first
// Apply of listeners; later ones go through Apply.
func (g *Gateway) Start(ctx context.Context, listeners []ListenerConfig) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shutdown {
		return errClosed
	}
	return g.applyListenersLocked(ctx, listeners)
}

// applyListenersLocked starts new listeners, reconfigures unchanged ones and
// stops removed or re-addressed ones (those drain in the background, bounded
// by ctx). On a bind error the listeners started by this call are closed.
func (g *Gateway) applyListenersLocked(ctx context.Context, lcs []ListenerConfig) error {
	want := map[string]ListenerConfig{}
	for _, lc := range lcs {
		if _, dup := want[lc.Name]; dup {
			return fmt.Errorf("gateway: duplicate listener %q", lc.Name)
		}
		if err := lc.Check(); err != nil {
			return err
		}
		want[lc.Name] = lc
	}
	rates, err := g.listenerRateLimiters(lcs) // ratelimits.go
	if err != nil {
		return err
	}
	// The pipeline's limits are in place before a new listener serves its
	// first request, and restored on failure.
	prevLimits, prevRates := g.limits.Load(), g.listenerRates.Load()
	g.setListenerLimits(lcs)
	g.listenerRates.Store(&rates)
	var started []*ingress.Listener
	next := map[string]*ingress.Listener{}
	for _, lc := range lcs {
		if l := g.listeners[lc.Name]; l != nil && l.Address() == lc.Address {
			if err := l.Reconfigure(ctx, lc); err != nil {
				closeAll(started)
				g.limits.Store(prevLimits)
				g.listenerRates.Store(prevRates)
				return err
			}
			next[lc.Name] = l
			continue
		}
		l, err := ingress.Start(lc, g.ingressDeps())
		if err != nil {
			closeAll(started)
			g.limits.Store(prevLimits)
			g.listenerRates.Store(prevRates)
			return err
		}
		started = append(started, l)
		next[lc.Name] = l
	}
	for name, l := range g.listeners {
		if next[name] != l {
			g.drains.Background(g.log, name, func() error { return l.Shutdown(ctx) }, l.Close)
		}
	}
	g.listeners = next
	g.setListenerMesh(lcs) // mesh.go
	g.setListenerTLS(lcs)
	return nil
}

func closeAll(ls []*ingress.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

// Addrs returns the bound address of every listener by name (useful with
// port 0): the UDP address, or the TCP one for a listener without h3. Both
// sockets of a listener share the port.
func (g *Gateway) Addrs() map[string]net.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := make(map[string]net.Addr, len(g.listeners))
	for name, l := range g.listeners {
		m[name] = l.Addr()
	}
	return m
}

// Protocols returns the protocols each listener serves, by name, in the
// order h1, h2, h3.
func (g *Gateway) Protocols() map[string][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := make(map[string][]string, len(g.listeners))
	for name, l := range g.listeners {
		m[name] = l.Protocols()
	}
	return m
}

// Close stops every listener at once: open connections are closed (QUIC
// with H3_REQUEST_CANCELLED) so clients fail fast instead of waiting for an
// idle timeout. It is the forced stop after a second signal.
func (g *Gateway) Close() {
	g.mu.Lock()
	ls := g.draining
	for _, l := range g.listeners {
		ls = append(ls, l)
	}
	g.listeners = map[string]*ingress.Listener{}
	g.shutdown = true
	g.mu.Unlock()
	closeAll(ls)
	g.drains.ForceAll()
	// The cut tunnels' handlers return at once and record them: wait
	// for them (briefly) before the access log closes.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && inFlight(ls) > 0; {
		time.Sleep(5 * time.Millisecond)
	}
	g.obs.Access.Close(time.Second) // the process exits next: what it holds, quickly
}

// inFlight is the requests the listeners ls are handling.
func inFlight(ls []*ingress.Listener) int64 {
	var n int64
	for _, l := range ls {
		n += l.InFlight()
	}
	return n
}

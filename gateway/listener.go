package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// listener is one HTTP/3 listener: a UDP socket owned by the gateway and the
// http3.Server that serves it.
type listener struct {
	name   string
	addr   string // as configured
	conn   net.PacketConn
	server *http3.Server
	tls    atomic.Pointer[tls.Config]
	done   chan struct{} // closed when Serve returns
	conns  sync.Map      // *quic.Conn → struct{}: open connections, for a forced close
	active atomic.Int64  // requests being handled
}

// ListenerError is a listener whose UDP socket could not be bound (address
// in use, cannot assign the address, permission denied): Name is its
// ListenerConfig.Name, Err the *net.OpError.
type ListenerError struct {
	Name string
	Err  error
}

func (e *ListenerError) Error() string { return fmt.Sprintf("gateway: listener %q: %v", e.Name, e.Err) }

// Unwrap returns the bind error.
func (e *ListenerError) Unwrap() error { return e.Err }

// startListener binds the UDP socket synchronously (so bind errors surface
// here) and serves it in the background.
func (g *Gateway) startListener(lc ListenerConfig) (*listener, error) {
	if lc.TLS == nil {
		return nil, fmt.Errorf("gateway: listener %q: no TLS configuration", lc.Name)
	}
	conn, err := net.ListenPacket("udp", lc.Address)
	if err != nil {
		return nil, &ListenerError{Name: lc.Name, Err: err}
	}
	l := &listener{name: lc.Name, addr: lc.Address, conn: conn, done: make(chan struct{})}
	l.tls.Store(lc.TLS)
	g.metrics.connDelta(lc.Name, 0) // the listener's series exists from the start
	// Certificates can change on reload without rebinding: each handshake
	// reads the current configuration.
	base := &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return http3.ConfigureTLSConfig(l.tls.Load()), nil
		},
	}
	l.server = &http3.Server{
		Handler:   l.counted(g.handlerFor(lc.Name)),
		TLSConfig: base,
		QUICConfig: &quic.Config{
			MaxIdleTimeout:        30 * time.Second,
			KeepAlivePeriod:       0,
			MaxIncomingStreams:    256,
			MaxIncomingUniStreams: 16,
		},
		Logger: g.qlog,
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			g.metrics.connOpened(lc.Name)
			l.conns.Store(c, struct{}{})
			context.AfterFunc(c.Context(), func() {
				l.conns.Delete(c)
				g.metrics.connClosed(lc.Name)
			})
			return ctx
		},
	}
	go func() {
		defer close(l.done)
		if err := l.server.Serve(conn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error("listener stopped", "listener", lc.Name, "error", err)
		}
	}()
	g.log.Info("listener started", "listener", lc.Name, "protocol", "http3", "address", conn.LocalAddr().String())
	return l, nil
}

// shutdown sends GOAWAY, waits for in-flight requests until ctx is done,
// then closes the remaining connections and the socket.
func (l *listener) shutdown(ctx context.Context) error {
	// Out of time, tell the clients their requests were cut (RFC 9114 §8.1)
	// before quic-go's own close would report H3_NO_ERROR.
	inner, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, func() {
		l.closeConns("drain_timeout reached")
		cancel()
	})
	quiet := make(chan struct{})
	go l.closeWhenQuiet(inner, quiet)
	err := l.server.Shutdown(inner)
	close(quiet)
	stop()
	cancel()
	if err != nil {
		err = ctx.Err()
	}
	_ = l.server.Close()
	cerr := l.conn.Close()
	<-l.done
	if err != nil {
		return fmt.Errorf("gateway: listener %q: %w", l.name, err)
	}
	if cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		return fmt.Errorf("gateway: listener %q: %w", l.name, cerr)
	}
	return nil
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

// applyListenersLocked starts new listeners, re-keys unchanged ones and
// stops removed or re-addressed ones (those drain in the background, bounded
// by ctx). On a bind error the listeners started by this call are closed.
func (g *Gateway) applyListenersLocked(ctx context.Context, lcs []ListenerConfig) error {
	want := map[string]ListenerConfig{}
	for _, lc := range lcs {
		if _, dup := want[lc.Name]; dup {
			return fmt.Errorf("gateway: duplicate listener %q", lc.Name)
		}
		want[lc.Name] = lc
	}
	var started []*listener
	next := map[string]*listener{}
	for _, lc := range lcs {
		if l := g.listeners[lc.Name]; l != nil && l.addr == lc.Address {
			l.tls.Store(lc.TLS)
			next[lc.Name] = l
			continue
		}
		l, err := g.startListener(lc)
		if err != nil {
			for _, s := range started {
				s.server.Close()
				s.conn.Close()
			}
			return err
		}
		started = append(started, l)
		next[lc.Name] = l
	}
	for name, l := range g.listeners {
		if next[name] != l {
			go func() {
				if err := l.shutdown(ctx); err != nil {
					g.log.Warn("listener drain", "listener", name, "error", err)
				}
			}()
		}
	}
	g.listeners = next
	g.setListenerTLS(lcs)
	return nil
}

// Addrs returns the bound UDP address of every listener by name (useful with
// port 0).
func (g *Gateway) Addrs() map[string]net.Addr {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := make(map[string]net.Addr, len(g.listeners))
	for name, l := range g.listeners {
		m[name] = l.conn.LocalAddr()
	}
	return m
}

// closeConns closes every open connection with H3_REQUEST_CANCELLED.
// drainQuiet is how long a draining listener must have no request in flight
// before it closes the connections its clients keep open (or abandoned
// without closing): requests a client sent before it saw GOAWAY have arrived
// by then. A variable for tests.
var drainQuiet = time.Second

// counted wraps h to count the requests being handled.
func (l *listener) counted(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.active.Add(1)
		defer l.active.Add(-1)
		h.ServeHTTP(w, r)
	})
}

// closeWhenQuiet closes the remaining connections with H3_NO_ERROR once no
// request has been in flight for drainQuiet, so a drain does not wait for
// clients that vanished until drain_timeout; it returns when ctx is done or
// stop is closed.
func (l *listener) closeWhenQuiet(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(drainQuiet / 10)
	defer tick.Stop()
	var idleSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case now := <-tick.C:
			switch {
			case l.active.Load() > 0:
				idleSince = time.Time{}
			case idleSince.IsZero():
				idleSince = now
			case now.Sub(idleSince) >= drainQuiet:
				l.conns.Range(func(k, _ any) bool {
					_ = k.(*quic.Conn).CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "drained")
					return true
				})
				return
			}
		}
	}
}

func (l *listener) closeConns(reason string) {
	l.conns.Range(func(k, _ any) bool {
		_ = k.(*quic.Conn).CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeRequestCanceled), reason)
		return true
	})
}

// Close stops every listener at once: open connections are closed with
// H3_REQUEST_CANCELLED so clients fail fast instead of waiting for an idle
// timeout. It is the forced stop after a second signal.
func (g *Gateway) Close() {
	g.mu.Lock()
	ls := g.draining
	for _, l := range g.listeners {
		ls = append(ls, l)
	}
	g.listeners = map[string]*listener{}
	g.shutdown = true
	g.mu.Unlock()
	for _, l := range ls {
		l.closeConns("shutting down")
		_ = l.server.Close()
		_ = l.conn.Close()
	}
}

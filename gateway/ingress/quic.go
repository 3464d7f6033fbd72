package ingress

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

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/clientaddr"
	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
)

// quicIngress is a listener's HTTP/3 side: a UDP socket owned by the
// gateway (behind a UDP balancer, wrapped to read its headers:
// udpconn.go), the quic.Transport on it (owned too, for address
// validation: addrvalidation.go) and the http3.Server that serves it.
type quicIngress struct {
	conn    net.PacketConn   // the socket
	proxied *proxyPacketConn // conn as quic-go sees it with proxy_protocol.udp; nil: conn itself
	tr      *quic.Transport
	server  *http3.Server
	done    chan struct{} // closed when Serve returns
	conns   sync.Map      // *quic.Conn → struct{}: open connections, for a forced close
	limits  Limits        // the server settings it was started with

	// handshaking counts connection attempts between their first Initial
	// and the end of their handshake (addrvalidation.go).
	handshaking atomic.Int64
	retried     atomic.Int64 // Initials answered with a Retry

	tickets h3Tickets // session tickets carrying the HTTP/3 settings (h3tickets.go)
}

// startQUIC serves HTTP/3 on conn in the background, with the server
// settings of lim (resolved). Errors: quic-go refusing the configuration.
func (l *Listener) startQUIC(conn net.PacketConn, lim Limits) (*quicIngress, error) {
	q := &quicIngress{conn: conn, done: make(chan struct{}), limits: lim}
	// Certificates can change on reload without rebinding: each handshake
	// reads the current configuration.
	base := &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return q.tickets.config(l.tls.Load().quic, lim.MaxHeaderBytes), nil
		},
	}
	q.server = &http3.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Before the handshake completes, a request can only have come
			// in 0-RTT packets (1-RTT keys need the client's Finished).
			if c, _ := r.Context().Value(quicConnKey{}).(*quic.Conn); c != nil && !handshakeDone(c) {
				r = withEarlyData(r)
			}
			l.serve(w, r, answer.Answer{})
		}),
		MaxHeaderBytes: lim.MaxHeaderBytes,
		// HTTP/3-level idleness: no request stream open for this long
		// (quic-go stops the timer while one is), whatever PINGs do.
		IdleTimeout: lim.IdleTimeout,
		Logger:      l.deps.QUICLog,
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			q.handshakeAccepted(ctx, c)
			if peer := socketPeer(c.RemoteAddr()); peer != "" {
				ctx = clientaddr.WithSocket(ctx, peer) // the balancer, for the access log
			}
			l.deps.Metrics.ConnDelta(false, l.name, 1)
			q.conns.Store(c, struct{}{})
			context.AfterFunc(c.Context(), func() {
				q.conns.Delete(c)
				l.deps.Metrics.ConnDelta(false, l.name, -1)
			})
			return tunnel.WithSet(context.WithValue(ctx, quicConnKey{}, c), &l.tunnels)
		},
	}
	var tconn net.PacketConn = conn
	if c := l.client.Load(); c != nil && c.proxy != nil && c.proxy.UDP != UDPNone {
		// A flow outlives its connection's idleness, handshake included.
		q.proxied = newProxyPacketConn(conn, l, max(lim.IdleTimeout, lim.ReadHeaderTimeout))
		tconn = q.proxied
	}
	q.tr = q.transport(tconn, l.conns)
	ln, err := q.tr.ListenEarly(http3.ConfigureTLSConfig(base), earlyDataSwitch(&quic.Config{
		// The QUIC idle timeout ends connections whose peer went
		// silent. Keep-alive PINGs (which a live peer acknowledges) stop
		// it from ending one whose request waits on a slow backend: idle
		// at the HTTP/3 layer (no request in flight) is server.IdleTimeout's.
		MaxIdleTimeout:        lim.IdleTimeout,
		HandshakeIdleTimeout:  lim.ReadHeaderTimeout,
		KeepAlivePeriod:       lim.IdleTimeout / 2,
		MaxIncomingStreams:    int64(lim.MaxConcurrentStreams),
		MaxIncomingUniStreams: 16,
	}, &l.early))
	if err != nil {
		return nil, err
	}
	l.deps.Metrics.ConnDelta(false, l.name, 0) // the listener's series exists from the start
	go func() {
		defer close(q.done)
		if err := q.server.ServeListener(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			l.deps.Log.Error("listener stopped", "listener", l.name, "protocol", ProtocolH3, "error", err)
		}
	}()
	return q, nil
}

// shutdown sends GOAWAY, waits for in-flight requests until ctx is done,
// then closes the remaining connections and the socket.
func (q *quicIngress) shutdown(ctx context.Context, l *Listener) error {
	// Out of time, tell the clients their requests were cut (RFC 9114 §8.1)
	// before quic-go's own close would report H3_NO_ERROR.
	inner, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, func() {
		q.closeConns("drain_timeout reached")
		cancel()
	})
	quiet, quietDone := make(chan struct{}), make(chan struct{})
	wait := drainQuiet // read here: the watcher must not outlive this call
	go func() {
		defer close(quietDone)
		q.closeWhenQuiet(inner, quiet, l, wait)
	}()
	err := q.server.Shutdown(inner)
	close(quiet)
	<-quietDone
	stop()
	cancel()
	if err != nil {
		err = ctx.Err()
	}
	_ = q.server.Close()
	_ = q.tr.Close()
	cerr := q.conn.Close()
	<-q.done
	if err != nil {
		return fmt.Errorf("gateway: listener %q: %w", l.name, err)
	}
	if cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		return fmt.Errorf("gateway: listener %q: %w", l.name, cerr)
	}
	return nil
}

// closeWhenQuiet closes the remaining connections with H3_NO_ERROR once no
// request has been in flight on the listener for wait (drainQuiet), so a drain
// does not wait for clients that vanished until drain_timeout; it returns
// when ctx is done or stop is closed.
func (q *quicIngress) closeWhenQuiet(ctx context.Context, stop <-chan struct{}, l *Listener, wait time.Duration) {
	tick := time.NewTicker(wait / 10)
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
			case now.Sub(idleSince) >= wait:
				q.conns.Range(func(k, _ any) bool {
					_ = k.(*quic.Conn).CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "drained")
					return true
				})
				return
			}
		}
	}
}

// closeConns closes every open connection with H3_REQUEST_CANCELLED.
func (q *quicIngress) closeConns(reason string) {
	q.conns.Range(func(k, _ any) bool {
		_ = k.(*quic.Conn).CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeRequestCanceled), reason)
		return true
	})
}

// close is the forced stop: connections closed with H3_REQUEST_CANCELLED,
// server and socket closed.
func (q *quicIngress) close(reason string) {
	q.closeConns(reason)
	_ = q.server.Close()
	_ = q.tr.Close()
	_ = q.conn.Close()
}

// quicConnKey is the connection context key of a request's *quic.Conn.
type quicConnKey struct{}

func handshakeDone(c *quic.Conn) bool {
	select {
	case <-c.HandshakeComplete():
		return true
	default:
		return false
	}
}

// earlyDataSwitch returns base with a GetConfigForClient that gives each new
// connection base with Allow0RTT set to on's value at that moment, so a
// reload turns 0-RTT on or off without rebinding. With it off, session
// tickets do not offer early data (quic-go sends them without
// max_early_data_size) and 0-RTT in a resumption is refused; resumption
// itself still works. base must not have GetConfigForClient.
func earlyDataSwitch(base *quic.Config, on *atomic.Bool) *quic.Config {
	off, early := base.Clone(), base.Clone()
	off.Allow0RTT, early.Allow0RTT = false, true
	sw := base.Clone()
	sw.GetConfigForClient = func(*quic.ClientInfo) (*quic.Config, error) {
		if on.Load() {
			return early, nil
		}
		return off, nil
	}
	return sw
}

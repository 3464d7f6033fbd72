package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// quicIngress is a listener's HTTP/3 side: a UDP socket owned by the
// gateway and the http3.Server that serves it.
type quicIngress struct {
	conn   net.PacketConn
	server *http3.Server
	done   chan struct{} // closed when Serve returns
	conns  sync.Map      // *quic.Conn → struct{}: open connections, for a forced close
}

// startQUIC serves HTTP/3 on conn in the background.
func (l *listener) startQUIC(conn net.PacketConn) *quicIngress {
	g := l.g
	q := &quicIngress{conn: conn, done: make(chan struct{})}
	g.metrics.connDelta(false, l.name, 0) // the listener's series exists from the start
	// Certificates can change on reload without rebinding: each handshake
	// reads the current configuration.
	base := &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return l.tls.Load().quic, nil
		},
	}
	q.server = &http3.Server{
		Handler:   l.handler,
		TLSConfig: base,
		QUICConfig: &quic.Config{
			MaxIdleTimeout:        30 * time.Second,
			KeepAlivePeriod:       0,
			MaxIncomingStreams:    256,
			MaxIncomingUniStreams: 16,
		},
		Logger: g.qlog,
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			g.metrics.connDelta(false, l.name, 1)
			q.conns.Store(c, struct{}{})
			context.AfterFunc(c.Context(), func() {
				q.conns.Delete(c)
				g.metrics.connDelta(false, l.name, -1)
			})
			return ctx
		},
	}
	go func() {
		defer close(q.done)
		if err := q.server.Serve(conn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			g.log.Error("listener stopped", "listener", l.name, "protocol", ProtocolH3, "error", err)
		}
	}()
	return q
}

// shutdown sends GOAWAY, waits for in-flight requests until ctx is done,
// then closes the remaining connections and the socket.
func (q *quicIngress) shutdown(ctx context.Context, l *listener) error {
	// Out of time, tell the clients their requests were cut (RFC 9114 §8.1)
	// before quic-go's own close would report H3_NO_ERROR.
	inner, cancel := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, func() {
		q.closeConns("drain_timeout reached")
		cancel()
	})
	quiet := make(chan struct{})
	go q.closeWhenQuiet(inner, quiet, l)
	err := q.server.Shutdown(inner)
	close(quiet)
	stop()
	cancel()
	if err != nil {
		err = ctx.Err()
	}
	_ = q.server.Close()
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
// request has been in flight on the listener for drainQuiet, so a drain
// does not wait for clients that vanished until drain_timeout; it returns
// when ctx is done or stop is closed.
func (q *quicIngress) closeWhenQuiet(ctx context.Context, stop <-chan struct{}, l *listener) {
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
	_ = q.conn.Close()
}

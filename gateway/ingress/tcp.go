package ingress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
	_ "github.com/impulse-agent/impulse-agent/internal/xconnect" // RFC 8441 in Go's HTTP/2 server
)

// tcpIngress is a listener's HTTP/1.1 and HTTP/2 side: a TCP socket owned
// by the gateway and the net/http Server that serves it over TLS, the
// protocol chosen by ALPN (RFC 7301).
type tcpIngress struct {
	ln     net.Listener
	server *http.Server
	done   chan struct{} // closed when Serve returns
	limits Limits        // the server settings it was started with
	prior  *priorH2      // HTTP/2 by prior knowledge without ALPN (mesh listeners; prior.go)
}

// errNoHTTP2 refuses a TLS client that offers no ALPN (so would speak
// HTTP/1.1) to a listener without h1.
var errNoHTTP2 = errors.New("client does not offer h2 and this listener does not serve HTTP/1.1")

// startTCP serves HTTP/1.1 and HTTP/2 over TLS on ln in the background,
// with the server settings of lim (resolved).
func (l *Listener) startTCP(ln net.Listener, lim Limits) *tcpIngress {
	t := &tcpIngress{ln: ln, done: make(chan struct{}), limits: lim, prior: newPriorH2(lim)}
	t.server = l.tcpServer(lim, t.prior)
	l.deps.Metrics.ConnDelta(true, l.name, 0)
	go func() {
		defer close(t.done)
		if err := t.server.ServeTLS(newLimitListener(l.wrapProxyProtocol(ln, lim.ReadHeaderTimeout), l.conns), "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			l.deps.Log.Error("listener stopped", "listener", l.name, "protocol", "tcp", "error", err)
		}
	}()
	return t
}

// tcpServer is the net/http Server of the listener's TCP ingress, with the
// server settings of lim (resolved). prior, when set, serves HTTP/2 by
// prior knowledge on a mesh listener's connections without ALPN.
func (l *Listener) tcpServer(lim Limits, prior *priorH2) *http.Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetHTTP2(true) // which one a connection gets is ALPN's choice (tls.tcp.NextProtos)
	srv := &http.Server{}
	var handler http.HandlerFunc
	handler = func(w http.ResponseWriter, r *http.Request) {
		if prior != nil && isPriorKnowledge(r) && l.mesh.Load() && l.protos.Load().h2 {
			prior.serve(l, w, r, srv, handler) // prior.go
			return
		}
		if v := l.altSvc.Load(); v != nil {
			// The gateway's own, set before the pipeline; wire.CopyResponse
			// drops a backend's (RFC 7838 §3: it is the origin's
			// statement about this connection, caddyserver/caddy#4996).
			w.Header()["Alt-Svc"] = *v
		}
		if p := l.protos.Load(); r.ProtoMajor == 1 && !p.h1 || r.ProtoMajor == 2 && !p.h2 {
			// A reload turned this connection's protocol off: this is
			// its last request. Go's HTTP/2 server turns "Connection:
			// close" into a graceful GOAWAY; HTTP/1.1 closes after the
			// response. Idle ones go at idle_timeout.
			w.Header()["Connection"] = []string{"close"}
		}
		l.serve(w, r, adaptTCP(w, r))
	}
	*srv = http.Server{
		Handler: handler,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				// A client offering only ALPNs the listener lacks gets
				// no_application_protocol from crypto/tls (RFC 7301 §3.2).
				// One offering none, or http/1.1 (which crypto/tls lets
				// through without ALPN), would speak HTTP/1.1: without h1 it
				// is refused here (internal_error, the only alert
				// GetConfigForClient can send).
				if !l.protos.Load().h1 && !slices.Contains(hello.SupportedProtos, "h2") &&
					(len(hello.SupportedProtos) == 0 || slices.Contains(hello.SupportedProtos, "http/1.1")) {
					return nil, errNoHTTP2
				}
				return l.tls.Load().tcp, nil
			},
		},
		ConnContext: socketContext, // the balancer's address behind PROXY (client.go)
		BaseContext: func(net.Listener) context.Context {
			return tunnel.WithSet(context.Background(), &l.tunnels)
		},
		Protocols: &protos,
		// OPTIONS * reaches the pipeline (404 no_route, as over HTTP/3),
		// not net/http's own 200.
		DisableGeneralOptionsHandler: true,
		HTTP2:                        &http.HTTP2Config{MaxConcurrentStreams: lim.MaxConcurrentStreams},
		// Also the TLS handshake's timeout (Go takes the lowest of the
		// read and write timeouts for it).
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		// Handshake failures and malformed requests are the client's, and
		// frequent at an edge: debug level.
		ErrorLog: l.deps.Log.Named("tcp").StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				l.deps.Metrics.ConnDelta(true, l.name, 1)
			case http.StateClosed, http.StateHijacked:
				l.deps.Metrics.ConnDelta(true, l.name, -1)
			}
		},
	}
	return srv
}

// shutdown stops accepting, sends GOAWAY on HTTP/2 connections and closes
// idle HTTP/1.1 ones (a response in flight goes out with "Connection:
// close"), waits for in-flight requests until ctx is done, then closes
// what remains.
func (t *tcpIngress) shutdown(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Go(func() { t.prior.shutdown(ctx) })
	err := t.server.Shutdown(ctx)
	_ = t.server.Close()
	wg.Wait()
	<-t.done
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway: tcp listener %s: %w", t.ln.Addr(), err)
	}
	return nil
}

// close is the forced stop: the socket and every connection close at once.
func (t *tcpIngress) close() {
	_ = t.server.Close()
	t.prior.close()
}

// NewTCPServer is a net/http Server as the listener's TCP socket serves:
// its adapter, limits and pipeline, over TLS unless the caller drops
// TLSConfig. For connections the listener did not accept: the fuzzer
// serves in-memory ones without TLS (FuzzIngress). nil when TCP is off.
func (l *Listener) NewTCPServer() *http.Server {
	if l.tcp == nil {
		return nil
	}
	return l.tcpServer(l.tcp.limits, nil)
}

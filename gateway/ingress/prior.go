package ingress

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// priorH2 serves HTTP/2 by prior knowledge on a mesh listener's TLS
// connections that negotiated no ALPN: Envoy's upstream clusters speak
// HTTP/2 without offering "h2" (issue 23). Go's server reads such a
// connection as HTTP/1.1, so its preface arrives as an HTTP/1.1 request
// "PRI * HTTP/2.0" (net/http lets that one through to the handler); the
// handler hijacks the connection and hands it, the preface consumed, to
// x/net/http2's server. Those connections are the ingress's own: counted
// in the connection gauge, sent GOAWAY at shutdown, closed at a forced
// stop.
type priorH2 struct {
	srv *http2.Server
	// base never serves: http2.ConfigureServer ties srv's graceful
	// shutdown (GOAWAY on every connection ServeConn runs) to
	// base.Shutdown.
	base  *http.Server
	conns sync.Map // *prefacedConn → struct{}
	wg    sync.WaitGroup
}

func newPriorH2(lim Limits) *priorH2 {
	p := &priorH2{srv: &http2.Server{MaxConcurrentStreams: uint32(lim.MaxConcurrentStreams), IdleTimeout: lim.IdleTimeout,
		MaxUploadBufferPerConnection: 0}, base: &http.Server{}}
	_ = http2.ConfigureServer(p.base, p.srv) // only fails for TLS settings base does not have
	return p
}

// isPriorKnowledge reports whether r is the HTTP/2 preface read as an
// HTTP/1.1 request on a TLS connection without ALPN.
func isPriorKnowledge(r *http.Request) bool {
	return r.Method == "PRI" && r.ProtoMajor == 2 && r.ProtoMinor == 0 && r.RequestURI == "*" &&
		r.TLS != nil && r.TLS.NegotiatedProtocol == ""
}

// serve takes over the connection of r (isPriorKnowledge) and serves it
// as HTTP/2 with handler, base giving the server settings, until it ends.
// A connection whose preface is not complete is closed.
func (p *priorH2) serve(l *Listener, w http.ResponseWriter, r *http.Request, base *http.Server, handler http.Handler) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	l.deps.Metrics.ConnDelta(true, l.name, 1) // net/http counted it closed at the hijack
	defer l.deps.Metrics.ConnDelta(true, l.name, -1)
	// The request line and empty header section were "PRI * HTTP/2.0\r\n\r\n";
	// the preface ends with "SM\r\n\r\n" (RFC 9113 §3.4).
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var sm [6]byte
	if _, err := io.ReadFull(rw.Reader, sm[:]); err != nil || string(sm[:]) != "SM\r\n\r\n" {
		_ = conn.Close()
		return
	}
	_ = conn.SetDeadline(time.Time{})
	buffered := make([]byte, rw.Reader.Buffered())
	_, _ = io.ReadFull(rw.Reader, buffered)
	tc, _ := conn.(*tls.Conn)
	pc := &prefacedConn{Conn: conn, r: io.MultiReader(bytes.NewReader(buffered), conn), tc: tc}
	p.wg.Add(1)
	defer p.wg.Done()
	p.conns.Store(pc, struct{}{})
	defer p.conns.Delete(pc)
	p.srv.ServeConn(pc, &http2.ServeConnOpts{Context: context.WithoutCancel(r.Context()), BaseConfig: base,
		Handler: handler, SawClientPreface: true})
}

// shutdown sends GOAWAY on every connection and waits until they end or
// ctx is done, then closes what remains.
func (p *priorH2) shutdown(ctx context.Context) {
	_ = p.base.Shutdown(ctx)
	done := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		p.close()
		<-done
	}
}

// close closes every connection at once.
func (p *priorH2) close() {
	p.conns.Range(func(k, _ any) bool {
		_ = k.(*prefacedConn).Close()
		return true
	})
}

// prefacedConn is a hijacked TLS connection whose reads start with what
// net/http had buffered; ConnectionState makes x/net/http2 see it as TLS
// (r.TLS, the peer's certificates).
type prefacedConn struct {
	net.Conn
	r  io.Reader
	tc *tls.Conn
}

func (c *prefacedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// ConnectionState is the TLS state of the connection (zero if it is not
// TLS, never on a mesh listener).
func (c *prefacedConn) ConnectionState() tls.ConnectionState {
	if c.tc == nil {
		return tls.ConnectionState{}
	}
	return c.tc.ConnectionState()
}

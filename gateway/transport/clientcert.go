package transport

import (
	"crypto/tls"
	"fmt"
	"sync"
	"time"
)

// A backend that requires a client certificate refuses one it does not
// accept (or its absence) during the handshake in TLS 1.2, which the dial
// reports as a TLS failure. In TLS 1.3 the client's handshake completes
// first; the server checks the certificate after, and answers with an
// alert ("certificate required", "bad certificate", "unknown certificate
// authority") and a close. The gateway has by then written its HTTP/2
// preface, and what x/net/http2 reports varies with the timing: the alert,
// a broken pipe on the next write, or, when the connection died before the
// request got its stream, only "http2: client conn could not be
// established". refusalConn makes it one answer: on a connection where the
// server asked for a client certificate, a failure before the server's
// first bytes arrived is a *DialError with TLS set (502
// backend_tls_failed, and a connect failure: the backend never read the
// request).

// refusalWait bounds how long a refused connection's read waits for the
// first request's write, so that the refusal reaches that request (below).
const refusalWait = time.Second

// withCertRequestWatch returns a copy of cfg that records, in *asked, that
// the server asked for a client certificate. It chooses the certificate as
// Go's client does without GetClientCertificate: the first of Certificates
// the request supports, else none. cfg's own GetClientCertificate, if any,
// is kept and called.
func withCertRequestWatch(cfg *tls.Config, asked *bool) *tls.Config {
	c := cfg.Clone()
	own := cfg.GetClientCertificate
	certs := cfg.Certificates
	c.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		*asked = true // the handshake runs on the dialling goroutine
		if own != nil {
			return own(cri)
		}
		for i := range certs {
			if cri.SupportsCertificate(&certs[i]) == nil {
				return &certs[i], nil
			}
		}
		return new(tls.Certificate), nil
	}
	return c
}

// refusalConn wraps a TLS connection whose server asked for a client
// certificate until the server's first bytes arrive. Until then a read or
// write error is the server refusing the handshake: both return it as a
// *DialError (TLS). A read that fails before the first request was written
// (x/net/http2 writes its preface in one write, then each request's
// HEADERS) waits, up to refusalWait or Close, for that write, which fails
// with the same error: x/net/http2 then reports the refusal to the
// request that dialled, instead of closing the connection before the
// request got its stream.
type refusalConn struct {
	*tls.Conn
	mu       sync.Mutex
	answered bool  // the server sent bytes: it accepted the handshake
	refused  error // the *DialError, once a read or write failed before
	writes   int   // Write calls so far
	wrote    chan struct{}
	once     sync.Once
}

func newRefusalConn(c *tls.Conn) *refusalConn {
	return &refusalConn{Conn: c, wrote: make(chan struct{})}
}

// refusal records err, unless the server has answered, and returns what
// the caller should return.
func (c *refusalConn) refusal(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.answered {
		return err
	}
	if c.refused == nil {
		c.refused = &DialError{Err: fmt.Errorf("the backend refused the connection after asking for a client certificate: %w", err), TLS: true}
	}
	return c.refused
}

// Read implements net.Conn.
func (c *refusalConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.mu.Lock()
		c.answered = true
		c.mu.Unlock()
	}
	if err == nil || n > 0 {
		return n, err
	}
	if rerr := c.refusal(err); rerr != err {
		c.mu.Lock()
		sent := c.writes >= 2 // the preface and a request
		c.mu.Unlock()
		if sent {
			return 0, rerr
		}
		t := time.NewTimer(refusalWait)
		defer t.Stop()
		select {
		case <-c.wrote:
		case <-t.C:
		}
		return 0, rerr
	}
	return n, err
}

// Write implements net.Conn. Once refused, every write fails at once.
func (c *refusalConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	refused := c.refused
	c.writes++
	c.mu.Unlock()
	if refused != nil {
		c.once.Do(func() { close(c.wrote) })
		return 0, refused
	}
	n, err := c.Conn.Write(b)
	if err != nil {
		return n, c.refusal(err)
	}
	return n, nil
}

// Close implements net.Conn. It closes the TCP connection if the TLS close
// (its close_notify, which may wait up to 5 s on an unresponsive peer)
// takes over 250 ms: x/net/http2 does so for a *tls.Conn, which this is
// not.
func (c *refusalConn) Close() error {
	c.once.Do(func() { close(c.wrote) })
	t := time.AfterFunc(250*time.Millisecond, func() { _ = c.NetConn().Close() })
	defer t.Stop()
	return c.Conn.Close()
}

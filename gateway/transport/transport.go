// Package transport builds the round-trippers that carry requests from the
// gateway to one backend: cleartext HTTP/1.1 for "http" backends, HTTP/2 over
// TLS for "https" backends, cleartext HTTP/2 with prior knowledge for "h2c"
// backends (RFC 9113 §3.3). It also classifies round-trip failures into the
// status and reason the gateway answers with.
package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

// Schemes a backend may use.
const (
	SchemeHTTP  = "http"  // cleartext HTTP/1.1
	SchemeHTTPS = "https" // HTTP/2 over TLS
	SchemeH2C   = "h2c"   // cleartext HTTP/2 with prior knowledge (RFC 9113 §3.3)
)

// IsHTTP2 reports whether scheme is carried over HTTP/2 (SchemeHTTPS or
// SchemeH2C): te: trailers passes, bodies are replayable after a GOAWAY or
// REFUSED_STREAM, and the gateway applies its own response-header timer.
func IsHTTP2(scheme string) bool { return scheme == SchemeHTTPS || scheme == SchemeH2C }

// URLScheme is the scheme of the request URL handed to a backend's
// round-tripper: "http" for SchemeH2C (x/net/http2 sends cleartext requests
// with :scheme http, RFC 9113 §8.3.1), the scheme itself otherwise.
func URLScheme(scheme string) string {
	if scheme == SchemeH2C {
		return SchemeHTTP
	}
	return scheme
}

// Options configure a backend transport. Zero durations mean "no limit"
// except ConnectTimeout, which defaults to 2s.
type Options struct {
	// Scheme is SchemeHTTP, SchemeHTTPS or SchemeH2C.
	Scheme string
	// TLS is the client TLS configuration for SchemeHTTPS; nil means system
	// roots with verification on. It is cloned, never modified.
	TLS *tls.Config
	// ConnectTimeout bounds TCP connect plus TLS handshake (TCP connect
	// alone for SchemeH2C).
	ConnectTimeout time.Duration
	// IdleTimeout closes pooled connections idle for this long.
	IdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers of
	// SchemeHTTP backends (net/http enforces it; 0 = none). HTTP/2 callers
	// apply their own timer.
	ResponseHeaderTimeout time.Duration
	// MaxIdlePerHost bounds idle HTTP/1.1 connections kept per backend
	// (default 256).
	MaxIdlePerHost int
	// Dial, when set, opens the TCP connection instead of dialing the
	// request's host: the caller dials its own resolved addresses (DNS
	// refresh). TLS still verifies the backend's hostname.
	Dial func(ctx context.Context, d *net.Dialer, network string) (net.Conn, error)
	// Handshaker, when set, secures every new connection itself (a Consul
	// Connect mTLS handshake: gateway/mesh.Outbound) and TLS is ignored:
	// SchemeHTTP then carries HTTP/1.1 over the returned TLS connection,
	// SchemeHTTPS HTTP/2 over it (negotiated as "h2", or with no ALPN at
	// all, by prior knowledge). SchemeH2C does not take one. Its failures,
	// like ConnectTimeout running out during it, are *DialError with TLS
	// set: connect failures that the backend never saw a request on.
	Handshaker Handshaker
}

// Handshaker runs the client side of a TLS handshake on raw, a new
// connection to the backend, and returns the secured connection. It closes
// raw on error.
type Handshaker interface {
	Handshake(ctx context.Context, raw net.Conn) (*tls.Conn, error)
}

// RoundTripper is an http.RoundTripper whose idle connections can be closed
// when its backend leaves the upstream.
type RoundTripper interface {
	http.RoundTripper
	CloseIdleConnections()
}

// New returns a round-tripper for one backend. Errors: an unknown scheme.
func New(o Options) (RoundTripper, error) {
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 2 * time.Second
	}
	if o.MaxIdlePerHost <= 0 {
		o.MaxIdlePerHost = 256
	}
	dialer := &net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if o.Dial != nil {
		dial = func(ctx context.Context, network, _ string) (net.Conn, error) { return o.Dial(ctx, dialer, network) }
	}
	if o.Handshaker != nil {
		return newHandshaking(o, dial)
	}
	switch o.Scheme {
	case SchemeHTTP:
		return &h1Transport{
			dial: dial, headerTimeout: o.ResponseHeaderTimeout, idleTimeout: o.IdleTimeout, maxIdle: o.MaxIdlePerHost,
			fallback: &http.Transport{
				DialContext:           dial,
				MaxIdleConns:          0,
				MaxIdleConnsPerHost:   o.MaxIdlePerHost,
				IdleConnTimeout:       o.IdleTimeout,
				ResponseHeaderTimeout: o.ResponseHeaderTimeout,
				// Never negotiate HTTP/2 on an http:// backend: the scheme means HTTP/1.1.
				TLSNextProto:       map[string]func(string, *tls.Conn) http.RoundTripper{},
				DisableCompression: true,
				ForceAttemptHTTP2:  false,
			}}, nil
	case SchemeHTTPS:
		tc := &tls.Config{}
		if o.TLS != nil {
			tc = o.TLS.Clone()
		}
		tc.NextProtos = []string{http2.NextProtoTLS}
		if tc.MinVersion == 0 {
			tc.MinVersion = tls.VersionTLS12
		}
		timeout := o.ConnectTimeout
		return &http2.Transport{
			TLSClientConfig:    tc,
			DisableCompression: true,
			IdleConnTimeout:    o.IdleTimeout,
			// Detect dead connections instead of waiting on the kernel.
			ReadIdleTimeout: 30 * time.Second,
			PingTimeout:     10 * time.Second,
			DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
				ctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				raw, err := dial(ctx, network, addr)
				if err != nil {
					return nil, &DialError{Err: err}
				}
				asked := false // the server asked for a client certificate (clientcert.go)
				c := tls.Client(raw, withCertRequestWatch(cfg, &asked))
				if err := c.HandshakeContext(ctx); err != nil {
					raw.Close()
					return nil, &DialError{Err: err, TLS: true}
				}
				if p := c.ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
					c.Close()
					return nil, &DialError{Err: fmt.Errorf("backend %s did not negotiate HTTP/2 (ALPN %q)", addr, p), TLS: true}
				}
				if asked && c.ConnectionState().Version >= tls.VersionTLS13 {
					return newRefusalConn(c), nil
				}
				return c, nil
			},
		}, nil
	case SchemeH2C:
		// The x/net h2c idiom: AllowHTTP takes http:// URLs (see URLScheme)
		// and the "TLS" dial opens plain TCP, on which the client connection
		// preface is sent at once (prior knowledge, RFC 9113 §3.3).
		timeout := o.ConnectTimeout
		return &http2.Transport{
			AllowHTTP:          true,
			DisableCompression: true,
			IdleConnTimeout:    o.IdleTimeout,
			ReadIdleTimeout:    30 * time.Second,
			PingTimeout:        10 * time.Second,
			DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				ctx, cancel := context.WithTimeout(ctx, timeout)
				defer cancel()
				c, err := dial(ctx, network, addr)
				if err != nil {
					return nil, &DialError{Err: err}
				}
				return c, nil
			},
		}, nil
	default:
		return nil, fmt.Errorf("transport: unknown scheme %q (want %q, %q or %q)", o.Scheme, SchemeHTTP, SchemeHTTPS, SchemeH2C)
	}
}

// DialError wraps a failure to connect to a backend before any request byte
// was sent: TCP connect (every scheme), or (TLS true) the TLS handshake or ALPN.
type DialError struct {
	Err error
	TLS bool
}

// Error implements error.
func (e *DialError) Error() string { return "transport: connect: " + e.Err.Error() }

// Unwrap returns the underlying dial, TLS or ALPN error.
func (e *DialError) Unwrap() error { return e.Err }

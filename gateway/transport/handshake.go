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

// newHandshaking builds the round-tripper of a backend whose connections
// are secured by o.Handshaker (Options.Handshaker): HTTP/1.1 (SchemeHTTP)
// or HTTP/2 (SchemeHTTPS) over the connections it returns. dial opens the
// TCP connection.
func newHandshaking(o Options, dial func(ctx context.Context, network, addr string) (net.Conn, error)) (RoundTripper, error) {
	hs, timeout := o.Handshaker, o.ConnectTimeout
	secure := func(ctx context.Context, network, addr string) (*tls.Conn, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, &DialError{Err: err}
		}
		c, err := hs.Handshake(ctx, raw)
		if err != nil {
			return nil, &DialError{Err: err, TLS: true}
		}
		return c, nil
	}
	switch o.Scheme {
	case SchemeHTTP:
		dialTLS := func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := secure(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if p := c.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
				c.Close()
				return nil, &DialError{Err: fmt.Errorf("backend %s negotiated ALPN %q, want http/1.1", addr, p), TLS: true}
			}
			return c, nil
		}
		return &h1Transport{
			dial: dialTLS, headerTimeout: o.ResponseHeaderTimeout, idleTimeout: o.IdleTimeout, maxIdle: o.MaxIdlePerHost,
			fallback: &http.Transport{
				DialContext:           dialTLS, // http:// URLs over the secured connection
				MaxIdleConnsPerHost:   o.MaxIdlePerHost,
				IdleConnTimeout:       o.IdleTimeout,
				ResponseHeaderTimeout: o.ResponseHeaderTimeout,
				TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
				DisableCompression:    true,
			}}, nil
	case SchemeHTTPS:
		return &http2.Transport{
			DisableCompression: true,
			IdleConnTimeout:    o.IdleTimeout,
			ReadIdleTimeout:    30 * time.Second,
			PingTimeout:        10 * time.Second,
			DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
				c, err := secure(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				if p := c.ConnectionState().NegotiatedProtocol; p != "" && p != http2.NextProtoTLS {
					c.Close()
					return nil, &DialError{Err: fmt.Errorf("backend %s negotiated ALPN %q, want h2", addr, p), TLS: true}
				}
				return c, nil
			},
		}, nil
	default:
		return nil, fmt.Errorf("transport: scheme %q with a handshaker (want %q or %q)", o.Scheme, SchemeHTTP, SchemeHTTPS)
	}
}

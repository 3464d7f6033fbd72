package gateway

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Clients for the gRPC tests: grpc-go over the TCP listener, and gRPC by hand
// over net/http and quic-go clients.

// grpcConn is a grpc-go client of h's TCP listener (HTTP/2 over TLS).
func grpcConn(t *testing.T, h *harness) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(h.base[len("https://"):],
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"})),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// h2Client is an HTTP/2-only client of h.
func h2Client(h *harness) *http.Client {
	c := &http.Client{Transport: clientTransport(ProtocolH2, &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"})}
	h.t.Cleanup(c.CloseIdleConnections)
	return c
}

// rawGRPC is a gRPC call made by hand over an http.Client (HTTP/2 or
// HTTP/3): length-prefixed messages in a streamed request body, with
// content-type application/grpc and te: trailers.
type rawGRPC struct {
	t     *testing.T
	pw    *io.PipeWriter
	got   chan rawResult
	resp  *http.Response
	start time.Time
}

type rawResult struct {
	resp *http.Response
	err  error
}

// startRawGRPC starts a call of method (e.g. "/pkg.Svc/Unary"); hdr are
// more request fields, name and value in turn.
func startRawGRPC(t *testing.T, client *http.Client, base, method string, hdr ...string) *rawGRPC {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+method, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &rawGRPC{t: t, pw: pw, got: make(chan rawResult, 1), start: time.Now()}
	go func() {
		resp, err := client.Do(req)
		c.got <- rawResult{resp, err}
	}()
	t.Cleanup(func() {
		pw.CloseWithError(errors.New("test over"))
		if c.resp == nil {
			if r := <-c.got; r.resp != nil {
				c.resp = r.resp
			}
		}
		if c.resp != nil {
			c.resp.Body.Close()
		}
		cancel()
	})
	return c
}

// send writes one message (blocking until the transport took it).
func (c *rawGRPC) send(msg string) { _, _ = c.pw.Write([]byte(grpcMessage(msg))) }

// closeSend ends the request stream.
func (c *rawGRPC) closeSend() { c.pw.Close() }

// response waits for the response headers.
func (c *rawGRPC) response() *http.Response {
	c.t.Helper()
	if c.resp != nil {
		return c.resp
	}
	select {
	case r := <-c.got:
		if r.err != nil {
			c.t.Fatalf("gRPC call: %v", r.err)
		}
		c.resp = r.resp
	case <-time.After(10 * time.Second):
		c.t.Fatal("no response headers in 10s")
	}
	return c.resp
}

// recv reads the next response message; io.EOF at the end of the stream.
func (c *rawGRPC) recv() (string, error) {
	body := c.response().Body
	var p [5]byte
	if _, err := io.ReadFull(body, p[:]); err != nil {
		return "", err
	}
	msg := make([]byte, binary.BigEndian.Uint32(p[1:]))
	if _, err := io.ReadFull(body, msg); err != nil {
		return "", fmt.Errorf("message cut short: %w", err)
	}
	return string(msg), nil
}

// status is the call's grpc-status and grpc-message: from the trailers,
// or from the header section of a Trailers-Only response.
func (c *rawGRPC) status() (string, string) {
	resp := c.response()
	if s := resp.Header.Get("Grpc-Status"); s != "" {
		return s, resp.Header.Get("Grpc-Message")
	}
	return resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
}

// waitFor receives from ch within 10 s.
func waitFor[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

func drain[T any](ch chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

package testbackend

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// ConnServer accepts connections and serves each on its own goroutine
// until Close, which ends them all and waits: the plumbing of the raw
// backends, which write what net/http never would and read what it
// hides.
type ConnServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
}

// Listen serves on a new loopback port (see Serve).
func (s *ConnServer) Listen(serve func(net.Conn)) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.Serve(ln, serve)
	return nil
}

// Serve accepts connections on ln; serve runs per connection, which is
// closed when serve returns.
func (s *ConnServer) Serve(ln net.Listener, serve func(net.Conn)) {
	s.ln, s.conns = ln, map[net.Conn]bool{}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns[c] = true
			s.mu.Unlock()
			s.wg.Go(func() {
				defer func() {
					c.Close()
					s.mu.Lock()
					delete(s.conns, c)
					s.mu.Unlock()
				}()
				serve(c)
			})
		}
	})
}

// Addr is the address the server listens on.
func (s *ConnServer) Addr() net.Addr { return s.ln.Addr() }

// Close stops the server, closes its connections and waits for their
// handlers.
func (s *ConnServer) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// ServeConns serves ln with a ConnServer (handle need not close c) and
// closes it at the test's end.
func ServeConns(t testing.TB, ln net.Listener, handle func(c net.Conn)) *ConnServer {
	s := &ConnServer{}
	s.Serve(ln, handle)
	t.Cleanup(s.Close)
	return s
}

// CloseAfter at the end of a ScriptedH1 answer closes the connection after
// it (a body delimited by the end of the connection).
const CloseAfter = "\x00close"

// ScriptedH1 is a raw TCP HTTP/1.1 backend: it reads each request of a
// keep-alive connection and writes script's bytes as they are, so it can
// misbehave as net/http never would (stray bytes after a HEAD response, a
// body on a 204). It returns an *httptest.Server shell holding only the
// listener, to build a backend spec from.
func ScriptedH1(t testing.TB, script func(r *http.Request) string) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ServeConns(t, ln, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			out := script(req)
			if _, err := io.WriteString(c, strings.TrimSuffix(out, CloseAfter)); err != nil || strings.HasSuffix(out, CloseAfter) {
				return
			}
		}
	})
	return &httptest.Server{Listener: ln}
}

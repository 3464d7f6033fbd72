package gateway

import (
	"net"
	"sync"
)

// connServer accepts connections on a loopback port and serves each on
// its own goroutine until close, which ends them all and waits: the
// strict fuzz backends' plumbing. mu also guards what the serve function
// records.
type connServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool
}

// listen starts accepting; serve runs per connection, which is closed
// when serve returns.
func (s *connServer) listen(serve func(net.Conn)) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
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
	return nil
}

// close stops the server and waits for its connections.
func (s *connServer) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

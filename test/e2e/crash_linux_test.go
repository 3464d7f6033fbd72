package e2e

import (
	"net"
	"net/http"
	"sync"
	"syscall"
	"unsafe"
)

// quietTracker tells when a backend process holds no request at all: none
// in a handler, none being read (a connection in http.StateActive), no
// unread byte on any connection (FIONREAD) and no connection waiting to be
// accepted (TCP_INFO's accept-queue length on the listener). A SIGKILL at
// that instant is a crash between requests: whatever the gateway sends
// afterwards meets a refused or reset connection unread.
type quietTracker struct {
	ln    *net.TCPListener
	mu    sync.Mutex
	conns map[net.Conn]http.ConnState
}

func newQuietTracker(ln *net.TCPListener) *quietTracker {
	return &quietTracker{ln: ln, conns: map[net.Conn]http.ConnState{}}
}

// connState is the server's ConnState hook.
func (q *quietTracker) connState(c net.Conn, s http.ConnState) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch s {
	case http.StateHijacked, http.StateClosed:
		delete(q.conns, c)
	default:
		q.conns[c] = s
	}
}

// quiet reports whether no request is anywhere in the process; inHandler
// is the handlers' own count.
func (q *quietTracker) quiet(inHandler int64) bool {
	if inHandler != 0 || acceptQueue(q.ln) != 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for c, s := range q.conns {
		if s == http.StateActive || unread(c) != 0 {
			return false
		}
	}
	return true
}

// unread is the number of bytes in c's receive queue (FIONREAD); -1 when
// it cannot be read.
func unread(c net.Conn) int {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return -1
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	_ = raw.Control(func(fd uintptr) {
		var v int32
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&v))); e == 0 {
			n = int(v)
		}
	})
	return n
}

// acceptQueue is the number of connections the kernel completed on ln that
// were not accepted yet (TCP_INFO's tcpi_unacked for a listening socket);
// -1 when it cannot be read.
func acceptQueue(ln *net.TCPListener) int {
	raw, err := ln.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	_ = raw.Control(func(fd uintptr) {
		var info syscall.TCPInfo
		size := uint32(unsafe.Sizeof(info))
		if _, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
			uintptr(unsafe.Pointer(&info)), uintptr(unsafe.Pointer(&size)), 0); e == 0 {
			n = int(info.Unacked)
		}
	})
	return n
}

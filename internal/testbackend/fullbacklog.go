package testbackend

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// FullBacklog returns the address ("127.0.0.1:port") of a TCP listener
// whose accept queue is full: it was made with a backlog of 0 and never
// accepts, and FullBacklog connects to it until a connect hangs. Linux
// then drops every further SYN (the listen queue overflows), so a dial to
// the address hangs until its own timeout, as one to a host that does not
// answer (a non-routable address, a firewall that drops) would, but on
// loopback and without depending on the network. The listener and the
// connections that fill it are closed at the test's end.
func FullBacklog(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "full-backlog") // closes fd
	t.Cleanup(func() { f.Close() })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sa.(*syscall.SockaddrInet4).Port}).String()
	for i := 0; ; i++ {
		if i == 64 {
			t.Fatalf("testbackend: %s still accepts connections after %d (backlog 0)", addr, i)
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return addr // the queue is full: this SYN was dropped
		}
		if err != nil {
			t.Fatalf("testbackend: filling the accept queue of %s: %v", addr, err)
		}
		t.Cleanup(func() { c.Close() })
	}
}

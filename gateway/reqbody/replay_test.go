package reqbody

import (
	"errors"
	"io"
	"strings"
	"testing"
)

type closeCounter struct {
	io.Reader
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }

// TestReplayBody: a new attempt reads the body from its first byte, then
// the rest; the replaced attempt fails; past the limit, or once sealed, no
// attempt follows; the client's body is closed only when none can.
func TestReplayBody(t *testing.T) {
	src := &closeCounter{Reader: strings.NewReader("hello, world")}
	first, getBody := newReplayBody(src, 64, 12)
	p := make([]byte, 5)
	if n, _ := first.Read(p); string(p[:n]) != "hello" {
		t.Fatalf("first read %q", p[:n])
	}
	first.Close() // the transport gave the attempt up: a retry may follow
	if src.closed != 0 {
		t.Fatal("closed the client's body while a retry could follow")
	}
	second, err := getBody()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Read(p); !errors.Is(err, errBodyReplaced) {
		t.Fatalf("replaced attempt read: %v", err)
	}
	if all, err := io.ReadAll(second); err != nil || string(all) != "hello, world" {
		t.Fatalf("second attempt read %q, %v", all, err)
	}
	second.Close()
	endReplayOf(second)
	if src.closed != 1 {
		t.Fatalf("client body closed %d times after the round trip, want 1", src.closed)
	}
	if _, err := getBody(); !errors.Is(err, ErrNotReplayable) {
		t.Fatalf("GetBody after the round trip: %v", err)
	}

	// Limit 0 (a long body): taken over only while nobody has read it.
	long := &closeCounter{Reader: strings.NewReader(strings.Repeat("x", 100))}
	first, getBody = newReplayBody(long, 0, 100)
	if _, err := getBody(); err != nil {
		t.Fatalf("unread body not taken over: %v", err)
	}
	second, _ = getBody()
	if n, _ := second.Read(p); n != 5 {
		t.Fatalf("read %d", n)
	}
	if _, err := getBody(); !errors.Is(err, ErrNotReplayable) {
		t.Fatalf("GetBody after bytes were given up: %v", err)
	}
	if rest, _ := io.ReadAll(second); len(rest) != 95 {
		t.Fatalf("rest %d bytes", len(rest))
	}
}

func endReplayOf(rc io.ReadCloser) { rc.(*replayReader).b.seal() }

package reqbody

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// chunkReader returns its data in fixed-size pieces, then err.
type chunkReader struct {
	data  []byte
	chunk int
	err   error
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, c.err
	}
	n := copy(p[:min(len(p), c.chunk)], c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *chunkReader) Close() error { return nil }

func TestCoalescingBody(t *testing.T) {
	boom := errors.New("stream reset")
	tests := []struct {
		name    string
		size    int
		chunk   int
		readBuf int
		err     error
		reads   []int // sizes returned before the final error
		lastErr error
	}{
		{"packets coalesced to 32 KiB", 80 << 10, 1200, 32 << 10, io.EOF, []int{32 << 10, 32 << 10, 16 << 10}, io.EOF},
		{"a short buffer is filled", 10 << 10, 1000, 4 << 10, io.EOF, []int{4096, 4096, 2048}, io.EOF},
		{"an error mid-body comes after the bytes read", 5000, 1200, 32 << 10, boom, []int{5000}, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newCoalescingBody(&chunkReader{data: make([]byte, tt.size), chunk: tt.chunk, err: tt.err})
			defer b.Close()
			buf := make([]byte, tt.readBuf)
			var got []int
			for {
				n, err := b.Read(buf)
				if n > 0 {
					got = append(got, n)
				}
				if err != nil {
					if !errors.Is(err, tt.lastErr) {
						t.Fatalf("last error %v, want %v", err, tt.lastErr)
					}
					break
				}
			}
			if len(got) != len(tt.reads) {
				t.Fatalf("reads %v, want %v", got, tt.reads)
			}
			for i := range got {
				if got[i] != tt.reads[i] {
					t.Fatalf("reads %v, want %v", got, tt.reads)
				}
			}
		})
	}
}

// TestCoalescingBodyLargeBuffer: with a buffer over 32 KiB every read but
// the last still carries at least 32 KiB (as much as is buffered).
func TestCoalescingBodyLargeBuffer(t *testing.T) {
	const size = 300 << 10
	b := newCoalescingBody(&chunkReader{data: make([]byte, size), chunk: 1200, err: io.EOF})
	defer b.Close()
	buf := make([]byte, 64<<10)
	var got []int
	total := 0
	for {
		n, err := b.Read(buf)
		if n > 0 {
			got = append(got, n)
			total += n
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if total != size {
		t.Fatalf("%d bytes, want %d", total, size)
	}
	for i, n := range got[:len(got)-1] {
		if n < coalesceBytes {
			t.Fatalf("read %d of %v was %d bytes", i, got, n)
		}
	}
}

// stallReader returns one piece, then blocks until closed.
type stallReader struct {
	piece  []byte
	closed chan struct{}
}

func (s *stallReader) Read(p []byte) (int, error) {
	if len(s.piece) > 0 {
		n := copy(p, s.piece)
		s.piece = s.piece[n:]
		return n, nil
	}
	<-s.closed
	return 0, errors.New("closed")
}

func (s *stallReader) Close() error { close(s.closed); return nil }

// TestCoalescingBodyWindow: bytes of a client that pauses are passed on
// after the window even though the client's read is still blocked, and
// Close unblocks a Read and the reader goroutine (goleak checks the latter).
func TestCoalescingBodyWindow(t *testing.T) {
	b := newCoalescingBody(&stallReader{piece: make([]byte, 1024), closed: make(chan struct{})})
	start := time.Now()
	n, err := b.Read(make([]byte, 32<<10))
	if n != 1024 || err != nil {
		t.Fatalf("Read = %d, %v; want the 1024 bytes sent", n, err)
	}
	if d := time.Since(start); d < coalesceWindow || d > 10*coalesceWindow {
		t.Errorf("bytes held %v, want about the %v window", d, coalesceWindow)
	}
	done := make(chan error, 1)
	go func() { _, err := b.Read(make([]byte, 32<<10)); done <- err }()
	b.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Read after Close returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Read")
	}
}

// TestWatchedBodyBlamesOnlyTheClient: a read failing because the transport
// closed the body (its backend connection broke) is not a client failure;
// an incomplete body is.
func TestWatchedBodyBlamesOnlyTheClient(t *testing.T) {
	w := &watchedBody{ReadCloser: &stallReader{closed: make(chan struct{})}}
	done := make(chan struct{})
	go func() { w.Read(make([]byte, 10)); close(done) }()
	w.Close()
	<-done
	if f := w.failed(); f != OK {
		t.Errorf("after the transport's Close: failure %d, want none", f)
	}
	short := &watchedBody{ReadCloser: io.NopCloser(&chunkReader{data: make([]byte, 5), chunk: 5, err: io.ErrUnexpectedEOF})}
	io.ReadAll(short)
	if f := short.failed(); f != Incomplete {
		t.Errorf("short body: failure %d, want Incomplete", f)
	}
}

func TestBodyErrorKind(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int32
	}{
		{io.ErrUnexpectedEOF, Incomplete},
		{errBodyMalformed, Malformed},
		{errors.New("peer sent too much data"), Malformed},
		{&quic.StreamError{ErrorCode: 0x10c, Remote: true}, Canceled},
		{&http3.Error{ErrorCode: http3.ErrCodeRequestCanceled, Remote: true}, Canceled},
		{&quic.IdleTimeoutError{}, Canceled},
		{context.Canceled, Canceled},
	} {
		if got := Kind(tc.err); got != tc.want {
			t.Errorf("Kind(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

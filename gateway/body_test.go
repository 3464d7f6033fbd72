package gateway

import (
	"errors"
	"io"
	"testing"
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
		reads   []int // sizes returned, in order; the last with lastErr
		lastErr error
	}{
		{"small body in one read", 100, 40, 32 << 10, io.EOF, []int{100}, io.EOF},
		{"packets coalesced to 32 KiB", 80 << 10, 1200, 32 << 10, io.EOF, []int{32 << 10, 32 << 10, 16 << 10}, io.EOF},
		{"large buffer still returns at 32 KiB or more", 100 << 10, 1200, 64 << 10, io.EOF, []int{33600, 33600, 33600, 1600}, io.EOF},
		{"short buffer is filled", 10 << 10, 1000, 4 << 10, io.EOF, []int{4096, 4096, 2048}, io.EOF},
		{"error mid-body returned with the bytes read", 5000, 1200, 32 << 10, boom, []int{5000}, boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &coalescingBody{ReadCloser: &chunkReader{data: make([]byte, tt.size), chunk: tt.chunk, err: tt.err}}
			buf := make([]byte, tt.readBuf)
			var got []int
			var err error
			for err == nil {
				var n int
				n, err = b.Read(buf)
				got = append(got, n)
			}
			if !errors.Is(err, tt.lastErr) {
				t.Fatalf("last error %v, want %v", err, tt.lastErr)
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

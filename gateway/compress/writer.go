package compress

import (
	"io"
	"net/http"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Levels: a proxy compresses every response on the fly, on the request's
// own time and CPU, so each coding runs at a fast level that still takes
// most of the gain. Measured on 100 KB of JSON (one core of the project's
// 2-core machine; MB/s of JSON in, encoded size / JSON size):
//
//	gzip 1: 629 MB/s, 0.130   gzip 5: 344 MB/s, 0.112   gzip 6: 307 MB/s, 0.108
//	br 2:   149 MB/s, 0.111   br 3:   130 MB/s, 0.105   br 4:    83 MB/s, 0.102   br 5: 58 MB/s, 0.081
//	zstd SpeedFastest: 472 MB/s, 0.107                  zstd SpeedDefault: 410 MB/s, 0.111
//
// Hence: zstd at SpeedFastest (level 1), its window capped at 1 MiB so a
// pooled encoder stays small and every client can decode it (RFC 9659
// bounds HTTP's zstd windows at 8 MiB); br at quality 3 with a 256 KiB
// window (past 3 brotli's speed falls by a third or more per step;
// quality 11, the library's best, is for files compressed once); gzip at
// level 5 (klauspost's deflate: twice the speed of level 9, 15% smaller
// than level 1).
const (
	zstdWindow    = 1 << 20
	brotliQuality = 3
	brotliLGWin   = 18
	gzipLevel     = 5
)

// encoder is what the three libraries' streaming writers share.
type encoder interface {
	io.Writer
	Flush() error
	Close() error
	Reset(io.Writer)
}

// Writer is an http.ResponseWriter that encodes what is written to it
// before it reaches the client's writer: the body of one response, never
// buffered whole (Flush pushes out what the encoder holds, then flushes the
// client's writer). Get one with NewWriter, Close it after the last byte,
// and Release it once the response is over, whatever happened. Writers and
// their encoders are pooled: an encoded response allocates nothing once
// the pool is warm.
type Writer struct {
	rw     http.ResponseWriter
	coding Coding
	enc    encoder
	out    counter
}

// counter writes to the client's writer and counts the encoded bytes.
type counter struct {
	w io.Writer
	n int64
}

func (c *counter) Write(p []byte) (int, error) {
	if c.w == nil {
		return 0, io.ErrClosedPipe // released: never written again
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// pools holds idle Writers per coding, each with its encoder.
var pools = [numCodings]sync.Pool{
	Zstd: {New: func() any {
		w := &Writer{coding: Zstd}
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(zstdWindow), zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(err) // fixed, valid options
		}
		w.enc = enc
		return w
	}},
	Brotli: {New: func() any {
		w := &Writer{coding: Brotli}
		w.enc = brotli.NewWriterOptions(nil, brotli.WriterOptions{Quality: brotliQuality, LGWin: brotliLGWin})
		return w
	}},
	Gzip: {New: func() any {
		w := &Writer{coding: Gzip}
		enc, err := gzip.NewWriterLevel(nil, gzipLevel)
		if err != nil {
			panic(err) // a fixed, valid level
		}
		w.enc = enc
		return w
	}},
}

// NewWriter returns a Writer encoding with c (Zstd, Brotli or Gzip) to rw.
// The fields of rw's header must already say so (Apply).
func NewWriter(rw http.ResponseWriter, c Coding) *Writer {
	w := pools[c].Get().(*Writer)
	w.rw, w.out = rw, counter{w: rw}
	w.enc.Reset(&w.out)
	return w
}

// Header is the client's writer's header.
func (w *Writer) Header() http.Header { return w.rw.Header() }

// WriteHeader sends the status and fields.
func (w *Writer) WriteHeader(code int) { w.rw.WriteHeader(code) }

// Write encodes p; its count is of p's bytes, as io.Writer's.
func (w *Writer) Write(p []byte) (int, error) { return w.enc.Write(p) }

// Flush sends what the encoder holds (a sync point of the coding: what
// was written so far can be decoded) and flushes the client's writer, so a
// streamed response keeps its pace.
func (w *Writer) Flush() {
	if err := w.enc.Flush(); err != nil {
		return
	}
	if f, ok := w.rw.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is the client's writer (http.ResponseController).
func (w *Writer) Unwrap() http.ResponseWriter { return w.rw }

// Close ends the encoded stream: what the encoder holds and the coding's
// end go out. Call it only after a body copied whole: a body cut short
// must not end as a valid encoding.
func (w *Writer) Close() error { return w.enc.Close() }

// Written is the number of encoded bytes that reached the client's writer.
func (w *Writer) Written() int64 { return w.out.n }

// Release returns w and its encoder to the pool; w must not be used after.
func (w *Writer) Release() {
	w.rw, w.out.w = nil, nil
	pools[w.coding].Put(w)
}

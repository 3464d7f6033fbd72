package compress

import (
	"net/http"
	"testing"
)

// discard is a minimal http.ResponseWriter.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkCompress encodes a 100 KB JSON response with each coding at the
// gateway's levels, as relay does (a pooled Writer, the body in 32 KiB
// reads): MB/s is of the JSON, ratio the encoded size over it.
func BenchmarkCompress(b *testing.B) {
	body := jsonBody(100_000)
	for _, c := range all {
		b.Run(c.String(), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var out int64
			rw := &discard{h: http.Header{}}
			for b.Loop() {
				w := NewWriter(rw, c)
				for p := body; len(p) > 0; {
					n := min(len(p), 32<<10)
					w.Write(p[:n])
					p = p[n:]
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				out = w.Written()
				w.Release()
			}
			b.ReportMetric(float64(out)/float64(len(body)), "ratio")
		})
	}
}

package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestMalformedRequestsAreStreamErrors sends hand-encoded HEADERS frames that
// RFC 9114 §4.1.2 calls malformed; each must be answered with a stream error
// of type H3_MESSAGE_ERROR (0x10e), never forwarded to a backend.
func TestMalformedRequestsAreStreamErrors(t *testing.T) {
	var hits atomic.Int64
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	h := newHarness(t, staticUpstream("u", "/", be))
	valid := []qpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"}, {Name: ":authority", Value: "localhost"}, {Name: ":path", Value: "/"}}
	cases := map[string][]qpack.HeaderField{
		"missing :path":              valid[:3],
		"upper-case field name":      append(append([]qpack.HeaderField{}, valid...), qpack.HeaderField{Name: "X-Upper", Value: "1"}),
		"connection-specific field":  append(append([]qpack.HeaderField{}, valid...), qpack.HeaderField{Name: "connection", Value: "close"}),
		"pseudo-header after fields": append([]qpack.HeaderField{{Name: "x-a", Value: "1"}}, valid...),
		"unknown pseudo-header":      append(append([]qpack.HeaderField{}, valid...), qpack.HeaderField{Name: ":protocol-x", Value: "1"}),
	}
	conn := dialRaw(t, h)
	for name, fields := range cases {
		t.Run(name, func(t *testing.T) { wantMessageError(t, conn, headersFrame(fields...)) })
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("backend received %d malformed requests", n)
	}
}

// dialRaw opens a bare QUIC connection to the harness's listener, for
// hand-encoded HTTP/3 frames; the test's cleanup closes it.
func dialRaw(t *testing.T, h *harness) *quic.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, h.gw.Addrs()["test"].String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.CloseWithError(0, "") })
	return conn
}

// openStream opens a request stream on conn, waiting up to 10 s for the
// peer's stream limit.
func openStream(t *testing.T, conn *quic.Conn) *quic.Stream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return str
}

// wantMessageError sends raw as a whole request stream and requires the
// answer to be a stream error H3_MESSAGE_ERROR.
func wantMessageError(t *testing.T, conn *quic.Conn, raw []byte) {
	t.Helper()
	str := openStream(t, conn)
	if _, err := str.Write(raw); err != nil {
		t.Fatal(err)
	}
	str.Close()
	_, err := io.ReadAll(str)
	var se *quic.StreamError
	if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeMessageError) {
		t.Fatalf("got %v, want stream error H3_MESSAGE_ERROR", err)
	}
}

// headersFrame QPACK-encodes fields (static table and literals only) into a
// HEADERS frame (RFC 9114 §7.2.2).
func headersFrame(fields ...qpack.HeaderField) []byte {
	var block bytes.Buffer
	enc := qpack.NewEncoder(&block)
	for _, f := range fields {
		enc.WriteField(f)
	}
	return append(append([]byte{0x01}, varint(uint64(block.Len()))...), block.Bytes()...)
}

// varint encodes a QUIC variable-length integer (RFC 9000 §16).
func varint(v uint64) []byte {
	switch {
	case v < 1<<6:
		return []byte{byte(v)}
	case v < 1<<14:
		return []byte{byte(v>>8) | 0x40, byte(v)}
	default:
		return []byte{byte(v>>24) | 0x80, byte(v >> 16), byte(v >> 8), byte(v)}
	}
}

// TestB14ContentLengthMismatchIsMalformed: a request whose DATA frames run
// past its Content-Length or stop short of it, or whose trailers are
// malformed, is malformed (RFC 9114 §4.1.2). The client gets a stream error
// H3_MESSAGE_ERROR and the backend never receives the whole declared body,
// so it cannot run the request (a client retrying it would otherwise run it
// twice).
func TestB14ContentLengthMismatchIsMalformed(t *testing.T) {
	headers := headersFrame
	data := func(s string) []byte { return append(append([]byte{0x00}, varint(uint64(len(s)))...), s...) }
	req := func(cl string) []byte {
		f := []qpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "localhost"}, {Name: ":path", Value: "/"}}
		if cl != "" {
			f = append(f, qpack.HeaderField{Name: "content-length", Value: cl})
		}
		return headers(f...)
	}
	cases := map[string][]byte{
		"one DATA frame past it":   slices.Concat(req("5"), data("0123456789")),
		"DATA short of it":         slices.Concat(req("10"), data("01234")),
		"empty DATA short of it":   slices.Concat(req("10"), data("")),
		"a second DATA frame":      slices.Concat(req("5"), data("01234"), data("56789")),
		"pseudo-header in trailer": slices.Concat(req("5"), data("01234"), headers(qpack.HeaderField{Name: ":path", Value: "/x"})),
		"connection-specific trailer, no length": slices.Concat(req(""), data("01234"),
			headers(qpack.HeaderField{Name: "transfer-encoding", Value: "chunked"})),
		"DATA after content-length 0":   slices.Concat(req("0"), data("abc")),
		"bad trailer, content-length 0": slices.Concat(req("0"), headers(qpack.HeaderField{Name: ":path", Value: "/x"})),
	}
	forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
		var whole atomic.Int64
		hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.ReadAll(r.Body); err == nil {
				whole.Add(1)
			}
		})
		be := backendOver(t, proto, hf)
		h := newHarness(t, staticUpstream("u", "/", be))
		conn := dialRaw(t, h)
		for name, raw := range cases {
			t.Run(name, func(t *testing.T) { wantMessageError(t, conn, raw) })
		}
		if n := whole.Load(); n != 0 {
			t.Fatalf("the backend received %d whole malformed requests", n)
		}
		resp := h.get("/")
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("a good request after them: %d", resp.StatusCode)
		}
	})
}

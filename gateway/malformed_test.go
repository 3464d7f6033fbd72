package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// TestMalformedRequestsAreStreamErrors sends hand-encoded HEADERS frames that
// RFC 9114 §4.1.2 calls malformed; each must be answered with a stream error
// of type H3_MESSAGE_ERROR (0x10e), never forwarded to a backend.
func TestMalformedRequestsAreStreamErrors(t *testing.T) {
	var hits atomic.Int64
	be := newH1Backend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	h := newHarness(t, staticUpstream("u", "/", be))
	valid := []qpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"}, {Name: ":authority", Value: "localhost"}, {Name: ":path", Value: "/"}}
	cases := map[string][]qpack.HeaderField{
		"missing :path":              valid[:3],
		"upper-case field name":      append(append([]qpack.HeaderField{}, valid...), qpack.HeaderField{Name: "X-Upper", Value: "1"}),
		"connection-specific field":  append(append([]qpack.HeaderField{}, valid...), qpack.HeaderField{Name: "connection", Value: "close"}),
		"pseudo-header after fields": append([]qpack.HeaderField{{Name: "x-a", Value: "1"}}, valid...),
		"unknown pseudo-header":      append(append([]qpack.HeaderField{}, valid...), qpack.HeaderField{Name: ":protocol-x", Value: "1"}),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := quic.DialAddr(ctx, h.gw.Addrs()["test"].String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	for name, fields := range cases {
		t.Run(name, func(t *testing.T) {
			str, err := conn.OpenStreamSync(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var block bytes.Buffer
			enc := qpack.NewEncoder(&block)
			for _, f := range fields {
				enc.WriteField(f)
			}
			frame := append([]byte{0x01}, varint(uint64(block.Len()))...) // HEADERS frame, RFC 9114 §7.2.2
			frame = append(frame, block.Bytes()...)
			if _, err := str.Write(frame); err != nil {
				t.Fatal(err)
			}
			str.Close()
			_, err = io.ReadAll(str)
			var se *quic.StreamError
			if !errors.As(err, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeMessageError) {
				t.Fatalf("got %v, want stream error H3_MESSAGE_ERROR", err)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("backend received %d malformed requests", n)
	}
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

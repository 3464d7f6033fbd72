package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// bothProtocols runs f against an HTTP/1.1 and an HTTP/2-over-TLS backend
// serving hf.
func bothProtocols(t *testing.T, hf http.HandlerFunc, f func(t *testing.T, h *harness)) {
	forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
		f(t, newHarness(t, staticUpstream("u", "/", backendOver(t, proto, hf))))
	})
}

// TestB10UppercaseFieldNames: an upper-case field name makes a request
// malformed (H3_MESSAGE_ERROR, nothing forwarded) and the next request on
// the connection succeeds; a backend's "X-Backend" reaches the client as
// "x-backend" (RFC 9114 §4.2, §4.1.2).
func TestB10UppercaseFieldNames(t *testing.T) {
	var hits atomic.Int64
	bothProtocols(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("X-Backend", "a")
		io.WriteString(w, "ok")
	}, func(t *testing.T, h *harness) {
		hits.Store(0)
		conn := dialRaw(t, h)
		wantMessageError(t, conn, headersFrame(reqFields("GET", "/", qpack.HeaderField{Name: "X-Test", Value: "1"})...))
		_, frames, err := rawRequest(t, conn, headersFrame(reqFields("GET", "/")...), true)
		if err != nil || len(frames) == 0 {
			t.Fatalf("second request: %v %v", frames, err)
		}
		if s, _ := frames[0].field(":status"); s != "200" {
			t.Fatalf("second request: status %q", s)
		}
		if v, ok := frames[0].field("x-backend"); !ok || v != "a" {
			t.Errorf("x-backend = %q %v in %v", v, ok, frames[0].fields)
		}
		for _, f := range frames[0].fields {
			if f.Name != strings.ToLower(f.Name) {
				t.Errorf("upper-case response field %q", f.Name)
			}
		}
		if n := hits.Load(); n != 1 {
			t.Fatalf("backend got %d requests, want 1 (the valid one)", n)
		}
	})
}

// TestB11ConnectionSpecificFields: connection-specific request fields are
// malformed; "te: trailers" is accepted and reaches HTTP/2 backends only; the
// response never carries connection-specific fields and a chunked body
// arrives de-chunked (RFC 9114 §4.2; RFC 9113 §8.2.2).
func TestB11ConnectionSpecificFields(t *testing.T) {
	var hits atomic.Int64
	var mu sync.Mutex
	var te []string
	bothProtocols(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		mu.Lock()
		te = r.Header.Values("Te")
		mu.Unlock()
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Hop", "1")
		io.WriteString(w, "chunk1;")
		w.(http.Flusher).Flush() // unknown length: HTTP/1.1 chunked
		io.WriteString(w, "chunk2")
	}, func(t *testing.T, h *harness) {
		hits.Store(0)
		conn := dialRaw(t, h)
		for _, f := range []qpack.HeaderField{{Name: "connection", Value: "close"}, {Name: "keep-alive", Value: "timeout=5"},
			{Name: "proxy-connection", Value: "keep-alive"}, {Name: "upgrade", Value: "websocket"},
			{Name: "transfer-encoding", Value: "chunked"}, {Name: "te", Value: "gzip"}} {
			t.Run(f.Name+": "+f.Value, func(t *testing.T) { wantMessageError(t, conn, headersFrame(reqFields("GET", "/", f)...)) })
		}
		if n := hits.Load(); n != 0 {
			t.Fatalf("backend got %d malformed requests", n)
		}
		_, frames, err := rawRequest(t, conn, headersFrame(reqFields("GET", "/", qpack.HeaderField{Name: "te", Value: "trailers"})...), true)
		if err != nil || len(frames) == 0 {
			t.Fatalf("te: trailers: %v %v", frames, err)
		}
		if s, _ := frames[0].field(":status"); s != "200" {
			t.Fatalf("te: trailers: status %q", s)
		}
		mu.Lock()
		gotTE := strings.Join(te, ",")
		mu.Unlock()
		wantTE := map[string]string{"h1": "", "h2": "trailers"}[strings.TrimPrefix(t.Name(), "TestB11ConnectionSpecificFields/")]
		if gotTE != wantTE {
			t.Errorf("backend got te %q, want %q", gotTE, wantTE)
		}
		var body string
		for _, f := range frames[1:] {
			if f.typ == 0x0 {
				body += string(f.payload)
			}
		}
		if body != "chunk1;chunk2" {
			t.Errorf("body %q, want de-chunked chunk1;chunk2", body)
		}
		for _, f := range frames[0].fields {
			switch f.Name {
			case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te":
				t.Errorf("response carried %s: %q", f.Name, f.Value)
			case "x-hop": // named in Connection; HTTP/2 servers drop Connection itself (RFC 9113 §8.2.2)
				if wantTE == "" {
					t.Errorf("response carried %s: %q", f.Name, f.Value)
				}
			}
		}
	})
}

// TestB13HeaderSectionLimit: the limit is on the decoded header section
// (name + value + 32 per field, RFC 9114 §4.2.2), equals the advertised
// SETTINGS_MAX_FIELD_SECTION_SIZE, and over it the stream gets a 431 (RFC
// 6585 §5) without contacting the backend; other streams are unaffected.
// quic-go enforces it (limits.max_header_bytes, 64 KiB by default).
func TestB13HeaderSectionLimit(t *testing.T) {
	var hits atomic.Int64
	bothProtocols(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "ok")
	}, func(t *testing.T, h *harness) {
		hits.Store(0)
		// The limit the gateway advertises on its control stream.
		limit := advertisedFieldSectionSize(t, dialRaw(t, h))
		if limit != (Limits{}).Resolved().MaxHeaderBytes {
			t.Fatalf("advertised SETTINGS_MAX_FIELD_SECTION_SIZE %d, want %d", limit, (Limits{}).Resolved().MaxHeaderBytes)
		}
		base := reqFields("GET", "/")
		size := 0
		for _, f := range base {
			size += len(f.Name) + len(f.Value) + 32
		}
		// "accept: */*" is one byte on the wire (QPACK static index 29)
		// and 41 bytes decoded.
		accept := qpack.HeaderField{Name: "accept", Value: "*/*"}
		many := append([]qpack.HeaderField{}, base...)
		for n := size; n <= limit; n += 41 {
			many = append(many, accept)
		}
		// Just at the limit: one literal field filling the rest exactly.
		rest := limit - size - len("x-fill") - 32
		exact := append(append([]qpack.HeaderField{}, base...), qpack.HeaderField{Name: "x-fill", Value: strings.Repeat("a", rest)})
		over := append(append([]qpack.HeaderField{}, base...), qpack.HeaderField{Name: "x-fill", Value: strings.Repeat("a", rest+1)})

		conn := dialRaw(t, h)
		tiny := headersFrame(many...)
		if len(tiny) > limit/10 {
			t.Fatalf("the compressed section is %d bytes; want it tiny", len(tiny))
		}
		for name, c := range map[string]struct {
			raw    []byte
			status string
		}{
			"tiny on the wire, over decoded": {tiny, "431"},
			"one byte over":                  {headersFrame(over...), "431"},
			"exactly the limit":              {headersFrame(exact...), "200"},
		} {
			t.Run(name, func(t *testing.T) {
				before := hits.Load()
				_, frames, err := rawRequest(t, conn, c.raw, true)
				if len(frames) == 0 {
					t.Fatalf("no response (%v)", err)
				}
				if s, _ := frames[0].field(":status"); s != c.status {
					t.Fatalf("status %q, want %s", s, c.status)
				}
				if c.status == "431" && hits.Load() != before {
					t.Fatal("the backend was contacted")
				}
			})
		}
		resp := h.get("/")
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("a request after them: %d", resp.StatusCode)
		}
	})
}

// TestB17HEADResponses: HEAD answers are a HEADERS frame and FIN, zero DATA
// frames; Content-Length is kept when the backend sent one and never
// invented; stray bytes after a HEAD response (a raw HTTP/1.1 double) never
// reach a client and the next GET is correct (RFC 9110 §9.3.2, §8.6).
func TestB17HEADResponses(t *testing.T) {
	// The HTTP/2 side of (a)-(c) and the same rules for every status are in
	// TestNoContentConformance; here the HTTP/1.1 case with a GET after
	// each on the same backend connection, checked frame by frame.
	h1 := testbackend.ScriptedH1(t, func(r *http.Request) string {
		if r.Method == "GET" {
			return "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ngood"
		}
		switch r.URL.Path {
		case "/a":
			return "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"
		case "/b":
			return "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n" + stray1234
		default:
			return "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		}
	})
	h2 := framerH2(t, "u", "/", func(method, path string) testbackend.H2Reply {
		if method == "GET" {
			return testbackend.H2Reply{Blocks: [][]hpackField{h2status(200, "content-length", "4")}, Data: "good"}
		}
		switch path {
		case "/a":
			return testbackend.H2Reply{Blocks: [][]hpackField{h2status(200, "content-length", "1234")}}
		case "/b":
			return testbackend.H2Reply{Blocks: [][]hpackField{h2status(200, "content-length", "1234")}, Data: stray1234}
		default:
			return testbackend.H2Reply{Blocks: [][]hpackField{h2status(200)}}
		}
	})
	for name, uc := range map[string]UpstreamConfig{"h1": staticUpstream("u", "/", h1), "h2": h2} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, uc)
			conn := dialRaw(t, h)
			for path, cl := range map[string]string{"/a": "1234", "/b": "1234", "/c": ""} {
				_, frames, err := rawRequest(t, conn, headersFrame(reqFields("HEAD", path)...), true)
				if err != nil || len(frames) != 1 || frames[0].typ != 0x1 {
					t.Fatalf("HEAD %s: frames %d (%v), want one HEADERS frame then FIN", path, len(frames), err)
				}
				got, ok := frames[0].field("content-length")
				if cl == "" && ok || cl != "" && got != cl {
					t.Errorf("HEAD %s: content-length %q (present %v), want %q", path, got, ok, cl)
				}
				_, frames, err = rawRequest(t, conn, headersFrame(reqFields("GET", path)...), true)
				var body string
				for _, f := range frames {
					if f.typ == 0x0 {
						body += string(f.payload)
					}
				}
				if err != nil || body != "good" {
					t.Errorf("GET after HEAD %s: %q %v", path, body, err)
				}
			}
		})
	}
}

// TestB16ExpectContinue: a client that waits (up to 30 s) for the interim
// response before sending its body gets the 100, or the final status, within
// about a second; a backend that refuses at once (413) gets its answer to
// the client at once, and the gateway stops the client's body with
// STOP_SENDING H3_NO_ERROR (RFC 9110 §10.1.1, §15.2.1; RFC 9114 §4.1).
func TestB16ExpectContinue(t *testing.T) {
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
		b, _ := io.ReadAll(r.Body) // net/http sends the 100 here
		w.WriteHeader(http.StatusCreated)
		w.Write(b)
	}
	// A backend that neither sends 100 nor refuses: it just waits for the
	// body (an HTTP/1.0-style server).
	silent := testbackend.ScriptedH1(t, func(r *http.Request) string {
		return "HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"
	})
	cases := map[string]*httptest.Server{"h1": testbackend.NewH1(t, http.HandlerFunc(handler)), "h2": testbackend.NewH2(t, http.HandlerFunc(handler)), "h1 silent": silent}
	for name, be := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, staticUpstream("u", "/", be))
			conn := dialRaw(t, h)
			expect := headersFrame(reqFields("POST", "/upload",
				qpack.HeaderField{Name: "expect", Value: "100-continue"}, qpack.HeaderField{Name: "content-length", Value: "5"})...)
			str, err := conn.OpenStreamSync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			str.Write(expect)
			str.SetReadDeadline(time.Now().Add(30 * time.Second)) // the client's own patience
			first, err := readOneFrame(str)
			if err != nil {
				t.Fatalf("waiting for the interim response: %v", err)
			}
			if s, _ := first.field(":status"); s != "100" {
				t.Fatalf("first answer %q, want 100", s)
			}
			if d := time.Since(start); d > 1500*time.Millisecond {
				t.Fatalf("100 Continue after %v", d)
			}
			str.Write(dataFrame("hello"))
			str.Close()
			frames, err := readH3Frames(str)
			if err != nil || len(frames) == 0 {
				t.Fatalf("final response: %v %v", frames, err)
			}
			if s, _ := frames[0].field(":status"); s != "201" {
				t.Fatalf("final status %q, want 201", s)
			}
		})
	}
	t.Run("GET with a body of unknown length", func(t *testing.T) {
		// The gateway reads before the round trip to learn whether such a
		// GET has a body at all: the 100 must come at once, not after the
		// wait for a backend that has not been asked yet.
		h := newHarness(t, staticUpstream("u", "/", cases["h1"]))
		conn := dialRaw(t, h)
		str, err := conn.OpenStreamSync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		str.Write(headersFrame(reqFields("GET", "/search", qpack.HeaderField{Name: "expect", Value: "100-continue"})...))
		str.SetReadDeadline(time.Now().Add(30 * time.Second))
		first, err := readOneFrame(str)
		if err != nil {
			t.Fatal(err)
		}
		if s, _ := first.field(":status"); s != "100" || time.Since(start) > 500*time.Millisecond {
			t.Fatalf("first answer %q after %v, want 100 at once", s, time.Since(start))
		}
		str.Write(dataFrame("query"))
		str.Close()
		frames, err := readH3Frames(str)
		if err != nil || len(frames) < 2 || string(frames[1].payload) != "query" {
			t.Fatalf("final response %v %v", frames, err)
		}
	})
	for _, proto := range backendProtocols {
		t.Run(proto+" refuses with 413", func(t *testing.T) {
			be := cases[proto]
			h := newHarness(t, staticUpstream("u", "/", be))
			conn := dialRaw(t, h)
			str, err := conn.OpenStreamSync(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			str.Write(headersFrame(reqFields("POST", "/refuse",
				qpack.HeaderField{Name: "expect", Value: "100-continue"}, qpack.HeaderField{Name: "content-length", Value: "5"})...))
			str.SetReadDeadline(time.Now().Add(30 * time.Second))
			first, err := readOneFrame(str)
			if err != nil {
				t.Fatal(err)
			}
			if s, _ := first.field(":status"); s != "413" {
				t.Fatalf("first answer %q, want 413 at once", s)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Fatalf("413 after %v", d)
			}
			select {
			case <-str.Context().Done():
			case <-time.After(5 * time.Second):
				t.Fatal("the gateway did not stop the request stream")
			}
			var se *quic.StreamError
			if cause := context.Cause(str.Context()); !errors.As(cause, &se) || se.ErrorCode != quic.StreamErrorCode(http3.ErrCodeNoError) {
				t.Fatalf("request stream stopped with %v, want STOP_SENDING H3_NO_ERROR", cause)
			}
		})
	}
}

// readOneFrame reads the next HTTP/3 frame of a stream without reading past
// it (no buffering), so the stream can be read on afterwards.
func readOneFrame(r io.Reader) (h3Frame, error) {
	br := byteReader{r}
	typ, err := quicvarint.Read(br)
	if err != nil {
		return h3Frame{}, err
	}
	n, err := quicvarint.Read(br)
	if err != nil {
		return h3Frame{}, err
	}
	var frame []byte
	frame = quicvarint.Append(quicvarint.Append(frame, typ), n)
	payload := make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return h3Frame{}, err
	}
	frames, err := readH3Frames(bytes.NewReader(append(frame, payload...)))
	if err != nil || len(frames) != 1 {
		return h3Frame{}, fmt.Errorf("frame: %v", err)
	}
	return frames[0], nil
}

// byteReader reads one byte at a time from a stream (io.ByteReader).
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var one [1]byte
	_, err := io.ReadFull(b.r, one[:])
	return one[0], err
}

// advertisedFieldSectionSize reads the server's SETTINGS frame from its
// control stream and returns SETTINGS_MAX_FIELD_SECTION_SIZE (0x6; -1 when
// absent). quic-go's client does not expose it.
func advertisedFieldSectionSize(t *testing.T, conn *quic.Conn) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		str, err := conn.AcceptUniStream(ctx)
		if err != nil {
			t.Fatalf("no control stream: %v", err)
		}
		br := byteReader{str}
		if typ, err := quicvarint.Read(br); err != nil || typ != 0x00 {
			continue // QPACK streams
		}
		if ft, err := quicvarint.Read(br); err != nil || ft != 0x04 {
			t.Fatalf("first control frame %#x (%v), want SETTINGS", ft, err)
		}
		n, _ := quicvarint.Read(br)
		payload := make([]byte, n)
		if _, err := io.ReadFull(str, payload); err != nil {
			t.Fatal(err)
		}
		r := bytes.NewReader(payload)
		for r.Len() > 0 {
			id, _ := quicvarint.Read(r)
			v, _ := quicvarint.Read(r)
			if id == 0x6 {
				return int(v)
			}
		}
		return -1
	}
}

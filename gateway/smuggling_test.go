package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// recordingBackend is an HTTP/1.1 backend that records every request it
// receives (method, path, fields, body).
type recordingBackend struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path string
	header       http.Header
	body         string
}

func (rb *recordingBackend) start(t *testing.T) UpstreamConfig {
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rb.mu.Lock()
		rb.reqs = append(rb.reqs, recorded{r.Method, r.URL.Path, r.Header.Clone(), string(b)})
		rb.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	return staticUpstream("u", "/", be)
}

func (rb *recordingBackend) take() []recorded {
	rb.mu.Lock()
	defer rb.mu.Unlock()
	out := rb.reqs
	rb.reqs = nil
	return out
}

// rawH1 writes raw on a new TLS connection (ALPN http/1.1) to the harness
// and reads responses until the gateway closes the connection: their
// status codes and whether each announced the close (Connection: close).
// A connection still open after 10 s fails the test: every case here
// wants it closed.
func rawH1(t *testing.T, h *harness, raw string) (codes []int, closing []bool) {
	t.Helper()
	c, err := tls.Dial("tcp", h.gw.Addrs()["test"].String(), &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection stayed open after %v", codes)
			}
			return codes, closing // closed by the gateway
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		closing = append(closing, resp.Close)
	}
}

// TestI04TCPIngressCannotSmuggle: requests whose framing a peer could read
// differently never put the gateway out of step with the client or the
// backend. Go's HTTP/1.1 server rejects conflicting Content-Lengths, a
// bare CR and unknown transfer codings (400/501, connection closed); for
// Content-Length beside Transfer-Encoding it reads the body as chunked
// and drops the Content-Length (RFC 9112 §6.1 allows that), and the
// gateway then closes the connection, so bytes after that body are never
// read as a request. A bare LF as a line end (RFC 9112 §2.2) and an
// obsolete line fold (replaced by a space, RFC 9112 §5.2) are accepted and
// forwarded as Go parsed them: the backend gets fields the gateway wrote,
// not the client's bytes. HTTP/2 requests with connection-specific fields
// get a 400 from Go's server, CR/LF in a value a stream error
// PROTOCOL_ERROR (RFC 9113 §8.2.2, §8.2.1); the connection stays.
func TestI04TCPIngressCannotSmuggle(t *testing.T) {
	var rb recordingBackend
	h := newHarnessOver(t, ProtocolH1, rb.start(t))
	const host = "Host: localhost\r\n"
	smuggled := "GET /smuggled HTTP/1.1\r\n" + host + "\r\n"

	t.Run("h1 rejected", func(t *testing.T) {
		for _, c := range []struct {
			name, raw string
			code      int
		}{
			{"two content-lengths", "POST /u HTTP/1.1\r\n" + host + "Content-Length: 3\r\nContent-Length: 4\r\n\r\nabcd" + smuggled, 400},
			{"bare CR", "GET /u HTTP/1.1\r\n" + host + "X-A: 1\rX-B: 2\r\n\r\n" + smuggled, 400},
			{"space before colon", "POST /u HTTP/1.1\r\n" + host + "Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n" + smuggled, 400},
			{"transfer coding not chunked", "POST /u HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + smuggled, 501},
			{"two transfer-encodings", "POST /u HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, 501},
		} {
			codes, _ := rawH1(t, h, c.raw)
			if len(codes) != 1 || codes[0] != c.code {
				t.Errorf("%s: responses %v, want one %d and the connection closed", c.name, codes, c.code)
			}
			if got := rb.take(); len(got) != 0 {
				t.Errorf("%s: the backend received %+v", c.name, got)
			}
		}
	})

	t.Run("h1 content-length with transfer-encoding", func(t *testing.T) {
		for _, fields := range []string{
			"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
			"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
		} {
			codes, closing := rawH1(t, h, "POST /u HTTP/1.1\r\n"+host+fields+"\r\n0\r\n\r\n"+smuggled)
			if len(codes) != 1 || codes[0] != 200 || !closing[0] {
				t.Errorf("%q: responses %v (Connection: close %v), want one, with Connection: close", fields, codes, closing)
			}
			got := rb.take()
			if len(got) != 1 || got[0].path != "/u" || got[0].body != "" || got[0].header.Get("Content-Length") == "5" {
				t.Errorf("%q: the backend received %+v, want POST /u with an empty body, once", fields, got)
			}
		}
	})

	t.Run("h1 bare LF and obs-fold are parsed once, by the gateway", func(t *testing.T) {
		codes, _ := rawH1(t, h, "GET /u HTTP/1.1\n"+host+"X-A: 1\nX-B: 2\r\nX-Fold: a\r\n b\r\nConnection: close\r\n\r\n")
		got := rb.take()
		if len(codes) != 1 || codes[0] != 200 || len(got) != 1 {
			t.Fatalf("responses %v, backend %+v", codes, got)
		}
		hd := got[0].header
		if hd.Get("X-A") != "1" || hd.Get("X-B") != "2" || hd.Get("X-Fold") != "a b" {
			t.Errorf("the backend received X-A %q, X-B %q, X-Fold %q; want 1, 2, \"a b\"", hd.Get("X-A"), hd.Get("X-B"), hd.Get("X-Fold"))
		}
		for k, vs := range hd {
			for _, v := range vs {
				if strings.ContainsAny(v, "\r\n") {
					t.Errorf("field %s reached the backend with a line break: %q", k, v)
				}
			}
		}
	})

	t.Run("h2 stream errors", func(t *testing.T) {
		c := dialH2(t, h)
		var id uint32 = 1
		for _, c2 := range []struct {
			name   string
			fields []hpack.HeaderField
		}{
			{"transfer-encoding", h2fields("transfer-encoding", "chunked")},
			{"connection", h2fields("connection", "keep-alive")},
			{"keep-alive", h2fields("keep-alive", "timeout=5")},
			{"te other than trailers", h2fields("te", "gzip")},
			{"CR LF in a value", h2fields("x-a", "1\r\nx-b: 2")},
			{"LF in a value", h2fields("x-a", "1\nx-b: 2")},
			{"two different content-lengths", h2fields("content-length", "3", "content-length", "5")},
		} {
			c.request(id, "GET", "/u", true, c2.fields...)
			res := c.await(id)
			if res.rst != http2.ErrCodeProtocol && res.status != "400" {
				t.Errorf("%s: %+v, want 400 or RST_STREAM PROTOCOL_ERROR", c2.name, res)
			}
			id += 2
		}
		// Differing content-lengths with a body of the first one's length:
		// x/net/http2 would go by the first; the gateway refuses it.
		c.request(id, "POST", "/u", false, h2fields("content-length", "3", "content-length", "5")...)
		if err := c.fr.WriteData(id, true, []byte("abc")); err != nil {
			t.Fatal(err)
		}
		if res := c.await(id); res.status != "400" && res.rst != http2.ErrCodeProtocol {
			t.Errorf("two content-lengths with a body: %+v", res)
		}
		id += 2
		// The boundary of each stream was known: the connection stays.
		c.request(id, "GET", "/u", true)
		if res := c.await(id); res.status != "200" {
			t.Errorf("a good request after the stream errors: %+v", res)
		}
		if got := rb.take(); len(got) != 1 {
			t.Errorf("the backend received %d requests, want only the good one: %+v", len(got), got)
		}
	})
}

// h2client is a raw HTTP/2 client connection to the harness, for frames
// Go's client would never send.
type h2client struct {
	t   *testing.T
	c   *tls.Conn
	fr  *http2.Framer
	buf bytes.Buffer
	enc *hpack.Encoder

	settings map[http2.SettingID]uint32 // the server's first SETTINGS
}

// h2result is how a stream ended: its :status, a RST_STREAM code, or the
// connection's end (GOAWAY code, or closed).
type h2result struct {
	status string
	rst    http2.ErrCode
	goAway bool
	code   http2.ErrCode
	closed bool
}

// dialH2 opens a TLS connection with ALPN h2, sends the preface and an
// empty SETTINGS frame and reads the server's SETTINGS.
func dialH2(t *testing.T, h *harness) *h2client {
	t.Helper()
	c, err := tls.Dial("tcp", h.gw.Addrs()["test"].String(), &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	cl := &h2client{t: t, c: c, fr: http2.NewFramer(c, c), settings: map[http2.SettingID]uint32{}}
	cl.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cl.fr.MaxHeaderListSize = 1 << 20
	cl.enc = hpack.NewEncoder(&cl.buf)
	if err := cl.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	f, err := cl.fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %v, want SETTINGS", f)
	}
	_ = sf.ForeachSetting(func(s http2.Setting) error { cl.settings[s.ID] = s.Val; return nil })
	if err := cl.fr.WriteSettingsAck(); err != nil {
		t.Fatal(err)
	}
	return cl
}

// request sends a HEADERS frame for a GET-like request on stream id,
// extra fields after the pseudo-fields.
func (c *h2client) request(id uint32, method, path string, end bool, extra ...hpack.HeaderField) {
	c.t.Helper()
	if err := c.writeRequest(id, method, path, end, extra...); err != nil {
		c.t.Fatal(err)
	}
}

func (c *h2client) writeRequest(id uint32, method, path string, end bool, extra ...hpack.HeaderField) error {
	c.buf.Reset()
	for _, f := range append(h2fields(":method", method, ":scheme", "https", ":authority", "localhost", ":path", path), extra...) {
		c.enc.WriteField(f)
	}
	return c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndHeaders: true, EndStream: end})
}

// await reads frames until stream id gets response headers or a
// RST_STREAM, or the connection ends; it answers SETTINGS and PING.
func (c *h2client) await(id uint32) h2result {
	c.t.Helper()
	_ = c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.t.Fatalf("stream %d: no answer", id)
			}
			return h2result{closed: true}
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = c.fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			return h2result{goAway: true, code: f.ErrCode}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return h2result{rst: f.ErrCode}
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == id {
				return h2result{status: f.PseudoValue("status")}
			}
		}
	}
}

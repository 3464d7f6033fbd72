package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/reqbody"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
)

// rawExchange opens a request stream on conn, lets send write it (send
// closes nothing: rawExchange ends the stream once send returns), and reads
// the response: its final :status and body.
func rawExchange(t *testing.T, conn *quic.Conn, send func(str *quic.Stream)) (status string, body []byte) {
	t.Helper()
	str := openStream(t, conn)
	send(str)
	str.Close()
	str.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, b, err := readRawResponse(str)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	return status, []byte(b)
}

// h1Seen is how an HTTP/1.1 backend received a request's framing.
type h1Seen struct {
	method        string
	contentLength []string // the Content-Length field as sent
	te            []string // Transfer-Encoding
	body          int
}

// newFramingH1Backend is an HTTP/1.1 backend that reports each request's
// framing on the returned channel.
func newFramingH1Backend(t *testing.T) (*httptest.Server, chan h1Seen) {
	seen := make(chan h1Seen, 16)
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		seen <- h1Seen{method: r.Method, contentLength: r.Header["Content-Length"], te: r.TransferEncoding, body: int(n)}
		io.WriteString(w, "ok")
	}))
	return be, seen
}

// TestB15NoBodyMeansNoBodyFraming: requests without content reach the
// backend without body framing (RFC 9110 §8.6, RFC 9112 §6, RFC 9113 §8.1).
// GET, HEAD, DELETE and OPTIONS end with their HEADERS frame; POST has an
// empty body with and without content-length: 0, and with its FIN in a
// separate, empty STREAM frame. HTTP/1.1 gets no Transfer-Encoding, no
// Content-Length for the bodyless methods and Content-Length: 0 for POST;
// HTTP/2 gets HEADERS with END_STREAM and no DATA frame.
func TestB15NoBodyMeansNoBodyFraming(t *testing.T) {
	type tc struct {
		name, method string
		fields       []qpack.HeaderField
		lateFIN      bool // the FIN follows the HEADERS in an empty STREAM frame
	}
	var cases []tc
	for _, m := range []string{"GET", "HEAD", "DELETE", "OPTIONS"} {
		cases = append(cases, tc{name: m, method: m}, tc{name: m + " late FIN", method: m, lateFIN: true})
	}
	cl0 := []qpack.HeaderField{{Name: "content-length", Value: "0"}}
	cases = append(cases, tc{name: "POST empty", method: "POST"}, tc{name: "POST empty, late FIN", method: "POST", lateFIN: true},
		tc{name: "POST content-length 0", method: "POST", fields: cl0}, tc{name: "POST content-length 0, late FIN", method: "POST", fields: cl0, lateFIN: true})
	send := func(c tc) func(*quic.Stream) {
		return func(str *quic.Stream) {
			str.Write(headersFrame(reqFields(c.method, "/b15", c.fields...)...))
			if c.lateFIN {
				// The HEADERS frame leaves before the FIN: quic-go's
				// stream hands data to the packer at once when Write
				// returns only after a pause.
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	bodyless := func(m string) bool { return m != "POST" }

	t.Run("h1", func(t *testing.T) {
		be, seen := newFramingH1Backend(t)
		h := newHarness(t, staticUpstream("u", "/", be))
		conn := dialRaw(t, h)
		for _, c := range cases {
			if status, _ := rawExchange(t, conn, send(c)); status != "200" {
				t.Fatalf("%s: status %q", c.name, status)
			}
			s := <-seen
			wantCL := []string{"0"}
			if bodyless(c.method) {
				wantCL = nil
			}
			if s.te != nil || !slices.Equal(s.contentLength, wantCL) || s.body != 0 {
				t.Errorf("%s reached the backend with Transfer-Encoding %q, Content-Length %q, %d body bytes; want none, %q, 0",
					c.name, s.te, s.contentLength, s.body, wantCL)
			}
		}
	})
	t.Run("h2", func(t *testing.T) {
		fb := testbackend.NewFrameBackend(t, 0, 0)
		h := newHarness(t, staticUpstream("u", "/", fb.Server))
		conn := dialRaw(t, h)
		for i, c := range cases {
			if status, _ := rawExchange(t, conn, send(c)); status != "200" {
				t.Fatalf("%s: status %q", c.name, status)
			}
			st := fb.Answered()[i]
			if st.Method != c.method || !st.HeadersEnd || st.DataFrames != 0 {
				t.Errorf("%s reached the backend as %s with END_STREAM on HEADERS %v and %d DATA frames; want END_STREAM, none",
					c.name, st.Method, st.HeadersEnd, st.DataFrames)
			}
		}
	})
}

// TestB14BodyWithoutContentLengthIsForwardedWhole: a POST without
// content-length, 768 bytes in three DATA frames with pauses (each sent
// once the previous one reached the backend) and its FIN in an empty STREAM
// frame, reaches both backend protocols whole: HTTP/1.1 chunked, HTTP/2
// ending with END_STREAM. (A content-length that disagrees with the DATA:
// TestB14ContentLengthMismatchIsMalformed.)
func TestB14BodyWithoutContentLengthIsForwardedWhole(t *testing.T) {
	piece := string(make([]byte, 256))
	send := func(arrived <-chan int) func(*quic.Stream) {
		return func(str *quic.Stream) {
			str.Write(headersFrame(reqFields("POST", "/b14")...))
			for i := 1; i <= 3; i++ {
				str.Write(dataFrame(piece))
				for n := 0; n < 256*i; {
					select {
					case n = <-arrived:
					case <-time.After(10 * time.Second):
						t.Fatalf("piece %d never reached the backend (%d bytes did)", i, n)
					}
				}
			}
			// All 768 bytes are at the backend: the FIN (rawExchange's
			// Close) can only travel alone.
		}
	}
	t.Run("h1", func(t *testing.T) {
		arrived := make(chan int, 16)
		seen := make(chan h1Seen, 1)
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf, total := make([]byte, 1024), 0
			for {
				n, err := r.Body.Read(buf)
				if total += n; n > 0 {
					arrived <- total
				}
				if err != nil {
					break
				}
			}
			seen <- h1Seen{method: r.Method, contentLength: r.Header["Content-Length"], te: r.TransferEncoding, body: total}
			io.WriteString(w, "ok")
		}))
		h := newHarness(t, staticUpstream("u", "/", be))
		if status, _ := rawExchange(t, dialRaw(t, h), send(arrived)); status != "200" {
			t.Fatalf("status %q", status)
		}
		s := <-seen
		if s.body != 768 || !(slices.Equal(s.te, []string{"chunked"}) || slices.Equal(s.contentLength, []string{"768"})) {
			t.Fatalf("backend got %d bytes, Transfer-Encoding %q, Content-Length %q; want 768, chunked or 768", s.body, s.te, s.contentLength)
		}
	})
	t.Run("h2", func(t *testing.T) {
		arrived := make(chan int, 16)
		be := testbackend.NewH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			buf, total := make([]byte, 1024), 0
			var err error
			for err == nil {
				var n int
				n, err = r.Body.Read(buf)
				if total += n; n > 0 {
					arrived <- total
				}
			}
			if err != io.EOF || total != 768 { // EOF: the stream ended with END_STREAM
				http.Error(w, "short body", 500)
				return
			}
			io.WriteString(w, "ok")
		}))
		h := newHarness(t, staticUpstream("u", "/", be))
		if status, _ := rawExchange(t, dialRaw(t, h), send(arrived)); status != "200" {
			t.Fatalf("status %q", status)
		}
	})
}

// TestB15ProbeNeverStallsARequest: finding out whether a request without
// content-length has a body never holds back a client that sends its body
// only after the backend has seen the request (a full-duplex stream): it is
// forwarded after the bounded wait at most. With Expect (the client waits
// for the 100) it is forwarded without waiting at all: here the wait is
// made longer than the test's patience.
func TestB15ProbeNeverStallsARequest(t *testing.T) {
	forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
		started := make(chan struct{}, 1)
		hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			b, _ := io.ReadAll(r.Body)
			io.WriteString(w, string(b))
		})
		be := backendOver(t, proto, hf)
		h := newHarness(t, staticUpstream("u", "/", be))
		conn := dialRaw(t, h)
		for _, c := range []struct {
			method string
			expect bool
		}{{"GET", false}, {"POST", false}, {"POST", true}} {
			restore := func() {}
			if c.expect {
				restore = reqbody.SetProbeWait(time.Hour)
			}
			var extra []qpack.HeaderField
			if c.expect {
				extra = append(extra, qpack.HeaderField{Name: "expect", Value: "100-continue"})
			}
			status, body := rawExchange(t, conn, func(str *quic.Stream) {
				str.Write(headersFrame(reqFields(c.method, "/duplex", extra...)...))
				select {
				case <-started:
				case <-time.After(10 * time.Second):
					t.Errorf("%s (expect %v): the backend never saw the request while the client waited for it", c.method, c.expect)
				}
				str.Write(dataFrame("late body"))
			})
			restore()
			if status != "200" || string(body) != "late body" {
				t.Errorf("%s (expect %v): got %q %q", c.method, c.expect, status, body)
			}
		}
	})
}

// TestB15EmptyBodyKnownWithoutWaiting: when a request's stream ended with
// its HEADERS frame, the gateway knows there is no body without a goroutine
// or a timer (a read with a deadline that has passed returns io.EOF). The
// HTTP/3 client usually sends the FIN of a GET with its HEADERS; should
// quic-go stop answering such a read with io.EOF, every GET would take the
// bounded probe instead, and none would here.
func TestB15EmptyBodyKnownWithoutWaiting(t *testing.T) {
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	h := newHarness(t, staticUpstream("u", "/", be))
	const n = 20
	before := reqbody.Probes()
	for range n {
		resp := h.get("/")
		resp.Body.Close()
	}
	probed := reqbody.Probes() - before
	t.Logf("%d of %d bodyless GETs needed the bounded probe", probed, n)
	if probed == n {
		t.Fatalf("all %d bodyless GETs waited in the bounded probe; none was known to be empty at once", n)
	}
}

package testbackend

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// H2Stream is one request as a FrameBackend received it.
type H2Stream struct {
	Method, Path   string
	ContentLength  string // the content-length field, "" if absent
	HeadersEnd     bool   // END_STREAM on the HEADERS frame
	DataFrames     int    // DATA frames, empty ones included
	Body           int    // body bytes
	EndedWithFrame bool   // the request ended with END_STREAM (not a reset)
}

// FrameBackend is an HTTP/2 backend written on x/net/http2's Framer, for
// what net/http's server neither shows nor does on demand: the frames each
// request arrived in, and a graceful GOAWAY after a number of streams.
// Every complete request is answered 200 "ok".
type FrameBackend struct {
	*httptest.Server // over TLS (NewFrameBackend); nil for h2c
	// goAwayAfter: after answering this many streams on a connection, send
	// GOAWAY(NO_ERROR) naming the last of them, leave streams above it
	// unprocessed, and close once the ones below are answered (0: never).
	goAwayAfter int
	// maxStreams is advertised as SETTINGS_MAX_CONCURRENT_STREAMS (0: none).
	maxStreams uint32

	mu      sync.Mutex
	streams []H2Stream // answered requests, in order
	ignored []H2Stream // requests above a GOAWAY's last-stream-id, never processed
	conns   map[halfCloser]bool
}

// halfCloser is a backend connection: TLS (FrameBackend) or TCP (h2c).
type halfCloser interface {
	net.Conn
	CloseWrite() error
}

// NewFrameBackend starts a FrameBackend over TLS that sends GOAWAY after
// goAwayAfter streams per connection (0: never) and advertises maxStreams
// (0: no limit); it is closed at the test's end.
func NewFrameBackend(t testing.TB, goAwayAfter int, maxStreams uint32) *FrameBackend {
	fb := &FrameBackend{goAwayAfter: goAwayAfter, maxStreams: maxStreams, conns: map[halfCloser]bool{}}
	s := httptest.NewUnstartedServer(http.NotFoundHandler())
	s.TLS = &tls.Config{NextProtos: []string{http2.NextProtoTLS}}
	s.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
		http2.NextProtoTLS: func(_ *http.Server, c *tls.Conn, _ http.Handler) { fb.serve(c) },
	}
	s.StartTLS()
	fb.Server = s
	t.Cleanup(func() {
		fb.mu.Lock()
		for c := range fb.conns {
			c.Close()
		}
		fb.mu.Unlock()
		s.Close()
	})
	return fb
}

// NewH2CFrameBackend is a FrameBackend over cleartext TCP: an h2c backend
// that sends a graceful GOAWAY on demand. It returns the address it
// listens on; it is closed at the test's end.
func NewH2CFrameBackend(t testing.TB, goAwayAfter int, maxStreams uint32) (*FrameBackend, string) {
	t.Helper()
	fb := &FrameBackend{goAwayAfter: goAwayAfter, maxStreams: maxStreams, conns: map[halfCloser]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ServeConns(t, ln, func(c net.Conn) { fb.serve(c.(*net.TCPConn)) })
	return fb, ln.Addr().String()
}

// Unprocessed returns the requests a GOAWAY left unprocessed so far.
func (fb *FrameBackend) Unprocessed() []H2Stream {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return append([]H2Stream(nil), fb.ignored...)
}

// Answered returns the requests answered so far.
func (fb *FrameBackend) Answered() []H2Stream {
	fb.mu.Lock()
	defer fb.mu.Unlock()
	return append([]H2Stream(nil), fb.streams...)
}

func (fb *FrameBackend) serve(c halfCloser) {
	fb.mu.Lock()
	fb.conns[c] = true
	fb.mu.Unlock()
	defer func() {
		fb.mu.Lock()
		delete(fb.conns, c)
		fb.mu.Unlock()
		c.Close()
	}()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var settings []http2.Setting
	if fb.maxStreams > 0 {
		settings = append(settings, http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: fb.maxStreams})
	}
	if fr.WriteSettings(settings...) != nil {
		return
	}
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	open := map[uint32]*H2Stream{}
	answered, goneAway, closing := 0, false, false
	var lastID uint32
	answer := func(id uint32) {
		st := open[id]
		delete(open, id)
		st.EndedWithFrame = true
		fb.mu.Lock()
		fb.streams = append(fb.streams, *st)
		fb.mu.Unlock()
		hbuf.Reset()
		enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		enc.WriteField(hpack.HeaderField{Name: "content-length", Value: "2"})
		head := st.Method == "HEAD"
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true, EndStream: head})
		if !head {
			fr.WriteData(id, true, []byte("ok"))
		}
		answered++
		if fb.goAwayAfter > 0 && answered == fb.goAwayAfter && !goneAway {
			goneAway, lastID = true, id
			fr.WriteGoAway(lastID, http2.ErrCodeNo, nil)
		}
	}
	for {
		if goneAway && !closing {
			pending := false
			for id := range open {
				pending = pending || id <= lastID
			}
			if !pending {
				// Graceful: everything at or below lastID is answered.
				// Half-close and drain, so that no response is lost to a
				// reset of unread data.
				closing = true
				c.CloseWrite()
			}
		}
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		if closing {
			continue
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			id := f.StreamID
			if goneAway && id > lastID {
				st := H2Stream{}
				for _, hf := range f.Fields {
					if hf.Name == ":method" {
						st.Method = hf.Value
					}
				}
				fb.mu.Lock()
				fb.ignored = append(fb.ignored, st)
				fb.mu.Unlock()
				continue // never processed: the client must retry it
			}
			if st := open[id]; st != nil { // trailers
				answer(id)
				continue
			}
			st := &H2Stream{HeadersEnd: f.StreamEnded()}
			for _, hf := range f.Fields {
				switch hf.Name {
				case ":method":
					st.Method = hf.Value
				case ":path":
					st.Path = hf.Value
				case "content-length":
					st.ContentLength = hf.Value
				}
			}
			open[id] = st
			if f.StreamEnded() {
				answer(id)
			}
		case *http2.DataFrame:
			if n := uint32(len(f.Data())); n > 0 {
				fr.WriteWindowUpdate(0, n)
			}
			st := open[f.StreamID]
			if st == nil || goneAway && f.StreamID > lastID {
				continue
			}
			st.DataFrames++
			st.Body += len(f.Data())
			if n := uint32(len(f.Data())); n > 0 {
				fr.WriteWindowUpdate(f.StreamID, n)
			}
			if f.StreamEnded() {
				answer(f.StreamID)
			}
		case *http2.RSTStreamFrame:
			delete(open, f.StreamID)
		case *http2.GoAwayFrame:
			return
		}
	}
}

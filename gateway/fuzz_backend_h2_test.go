package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// strictH2Backend is a raw h2c backend (x/net/http2's Framer) that checks
// each request's header block against RFC 9113 §8.2–8.3 strictly: fields
// the framer's own checks let through are looked at again (lower-case
// token names, valid values, pseudo-header fields first and each once),
// and it refuses connection-specific fields, a TE other than "trailers",
// a CONNECT (the gateway sends none to HTTP/2 backends) and a :path that
// is not an origin-form target. It answers 200 "h2" on every stream.
// Problems are recorded with the fields.
type strictH2Backend struct {
	testbackend.ConnServer
	mu       sync.Mutex
	problems []string // guarded by mu
}

func newStrictH2Backend() (*strictH2Backend, error) {
	b := &strictH2Backend{}
	if err := b.Listen(b.serve); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *strictH2Backend) take() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.problems
	b.problems = nil
	return p
}

func (b *strictH2Backend) problem(format string, args ...any) {
	b.mu.Lock()
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
	b.mu.Unlock()
}

func (b *strictH2Backend) serve(c net.Conn) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	if string(preface) != http2.ClientPreface {
		b.problem("preface %q", preface)
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	if fr.WriteSettings() != nil {
		return
	}
	reply := func(id uint32) error {
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		enc.WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		enc.WriteField(hpack.HeaderField{Name: "content-length", Value: "2"})
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true}); err != nil {
			return err
		}
		return fr.WriteData(id, true, []byte("h2"))
	}
	for {
		f, err := fr.ReadFrame()
		var se http2.StreamError
		switch {
		case errors.As(err, &se):
			b.problem("stream %d: %v", se.StreamID, se)
			continue
		case err != nil:
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				b.problem("connection error %v", err)
			}
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && fr.WriteSettingsAck() != nil {
				return
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			if f.Truncated {
				b.problem("stream %d: header list too large", f.StreamID)
			}
			if why := checkH2Fields(f.Fields); why != "" {
				b.problem("stream %d: %s in %q", f.StreamID, why, f.Fields)
			}
			if f.StreamEnded() && reply(f.StreamID) != nil {
				return
			}
		case *http2.DataFrame:
			if len(f.Data()) > 0 {
				fr.WriteWindowUpdate(0, uint32(len(f.Data())))
				fr.WriteWindowUpdate(f.StreamID, uint32(len(f.Data())))
			}
			if f.StreamEnded() && reply(f.StreamID) != nil {
				return
			}
		case *http2.GoAwayFrame:
			return
		}
	}
}

// checkH2Fields returns what is wrong with a request's (or a trailer
// section's) fields, or "".
func checkH2Fields(fields []hpack.HeaderField) string {
	pseudo := map[string]string{}
	regular := false
	for _, hf := range fields {
		name := hf.Name
		if strings.HasPrefix(name, ":") {
			if regular {
				return "pseudo-header " + name + " after a regular field"
			}
			if _, dup := pseudo[name]; dup {
				return "pseudo-header " + name + " twice"
			}
			pseudo[name] = hf.Value
			continue
		}
		regular = true
		if !httpguts.ValidHeaderFieldName(name) || strings.ToLower(name) != name {
			return fmt.Sprintf("field name %q", name)
		}
		if !httpguts.ValidHeaderFieldValue(hf.Value) || strings.ContainsAny(hf.Value, "\r\n\x00") {
			return fmt.Sprintf("field %s value %q", name, hf.Value)
		}
		switch name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host", "http2-settings", "proxy-authorization":
			return "connection-specific field " + name
		case "te":
			if hf.Value != "trailers" {
				return "te " + hf.Value
			}
		}
	}
	if len(pseudo) == 0 {
		return "" // a trailer section
	}
	for name := range pseudo {
		if !slices.Contains([]string{":method", ":scheme", ":authority", ":path"}, name) {
			return "pseudo-header " + name
		}
	}
	switch m, p := pseudo[":method"], pseudo[":path"]; {
	case m == "" || !httpguts.ValidHeaderFieldName(m) || m == "CONNECT":
		return "method " + m
	case pseudo[":scheme"] != "http" && pseudo[":scheme"] != "https":
		return "scheme " + pseudo[":scheme"]
	case pseudo[":authority"] == "" || !validAuthority(pseudo[":authority"]):
		return "authority " + pseudo[":authority"]
	case !validRequestTarget(p) || p == "*" && m != "OPTIONS":
		return "path " + p
	}
	return ""
}

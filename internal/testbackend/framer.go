package testbackend

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// H2Reply is what FramerH2 sends on one stream: HEADERS blocks (1xx ones
// first), then DATA (if any), with END_STREAM on the last frame.
type H2Reply struct {
	Blocks [][]hpack.HeaderField
	Data   string
}

// FramerH2 is an HTTP/2-over-TLS backend double built on x/net/http2's
// Framer, for misbehaviour a real server refuses (DATA on a 204,
// content-length on a 1xx): script gives each request's reply. It returns
// the address it listens on and the roots that trust its certificate
// (for 127.0.0.1 and localhost); it is closed at the test's end.
func FramerH2(t testing.TB, script func(method, path string) H2Reply) (*net.TCPAddr, *x509.CertPool) {
	t.Helper()
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	ServeConns(t, ln, func(c net.Conn) { serveFramer(c, script) })
	return ln.Addr().(*net.TCPAddr), cert.Pool
}

func serveFramer(c net.Conn, script func(method, path string) H2Reply) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil || string(preface) != http2.ClientPreface {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		return
	}
	methods := map[uint32][2]string{}
	reply := func(id uint32) error {
		m := methods[id]
		rep := script(m[0], m[1])
		var buf bytes.Buffer
		enc := hpack.NewEncoder(&buf)
		for i, blk := range rep.Blocks {
			buf.Reset()
			for _, f := range blk {
				enc.WriteField(f)
			}
			last := i == len(rep.Blocks)-1 && rep.Data == ""
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: last}); err != nil {
				return err
			}
		}
		if rep.Data != "" {
			return fr.WriteData(id, true, []byte(rep.Data))
		}
		return nil
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return
				}
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			methods[f.StreamID] = [2]string{f.PseudoValue("method"), f.PseudoValue("path")}
			if f.StreamEnded() {
				if reply(f.StreamID) != nil {
					return
				}
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				if reply(f.StreamID) != nil {
					return
				}
			}
		case *http2.GoAwayFrame:
			return
		}
	}
}

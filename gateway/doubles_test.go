package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// h3Frame is one frame of an HTTP/3 response stream as received.
type h3Frame struct {
	typ     uint64 // 0x0 DATA, 0x1 HEADERS
	fields  []qpack.HeaderField
	payload []byte
}

// readH3Frames reads an HTTP/3 stream to its end (FIN: nil error) or its
// reset (the *quic.StreamError), frame by frame; HEADERS are QPACK-decoded
// (the gateway's encoder uses no dynamic table).
func readH3Frames(r io.Reader) ([]h3Frame, error) {
	br := bufio.NewReader(r)
	var frames []h3Frame
	for {
		typ, err := quicvarint.Read(br)
		if err == io.EOF {
			return frames, nil
		}
		if err != nil {
			return frames, err
		}
		n, err := quicvarint.Read(br)
		if err != nil {
			return frames, err
		}
		f := h3Frame{typ: typ, payload: make([]byte, n)}
		if _, err := io.ReadFull(br, f.payload); err != nil {
			return frames, err
		}
		if typ == 0x1 {
			dec := qpack.NewDecoder().Decode(f.payload)
			for {
				hf, err := dec()
				if err == io.EOF {
					break
				}
				if err != nil {
					return frames, err
				}
				f.fields = append(f.fields, hf)
			}
		}
		frames = append(frames, f)
	}
}

// field returns the value of name in f's fields and whether it is there.
func (f h3Frame) field(name string) (string, bool) {
	for _, hf := range f.fields {
		if hf.Name == name {
			return hf.Value, true
		}
	}
	return "", false
}

// rawRequest sends raw (hand-made frames) on a new stream of conn, ends the
// stream when fin, and reads the whole answer.
func rawRequest(t *testing.T, conn *quic.Conn, raw []byte, fin bool) (*quic.Stream, []h3Frame, error) {
	t.Helper()
	str := openStream(t, conn)
	if _, err := str.Write(raw); err != nil {
		t.Fatal(err)
	}
	if fin {
		str.Close()
	}
	str.SetReadDeadline(time.Now().Add(10 * time.Second))
	frames, err := readH3Frames(str)
	return str, frames, err
}

// reqFields are the pseudo-header fields of a request to the harness.
func reqFields(method, path string, extra ...qpack.HeaderField) []qpack.HeaderField {
	f := []qpack.HeaderField{{Name: ":method", Value: method}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "localhost"}, {Name: ":path", Value: path}}
	return append(f, extra...)
}

// dataFrame is an HTTP/3 DATA frame carrying s.
func dataFrame(s string) []byte { return append(append([]byte{0x00}, varint(uint64(len(s)))...), s...) }

// scriptedH1 is a raw TCP HTTP/1.1 backend double: it reads each request of
// a keep-alive connection and writes script's bytes as sent, so it can
// misbehave as net/http never would (stray bytes after a HEAD response, a
// body on a 204). It returns an *httptest.Server shell for staticUpstream.
func scriptedH1(t *testing.T, script func(r *http.Request) string) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveConns(t, ln, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			out := script(req)
			if _, err := io.WriteString(c, strings.TrimSuffix(out, closeAfter)); err != nil || strings.HasSuffix(out, closeAfter) {
				return
			}
		}
	})
	return &httptest.Server{Listener: ln}
}

// serveConns accepts connections on ln and runs handle on each in its own
// goroutine (handle need not close c); at the test's end it closes ln and
// every connection and waits for the handlers.
func serveConns(t *testing.T, ln net.Listener, handle func(c net.Conn)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// closeAfter at the end of a scriptedH1 answer closes the connection after
// it (a body delimited by the end of the connection).
const closeAfter = "\x00close"

// h2Reply is what framerH2 sends on one stream: HEADERS blocks (1xx ones
// first), then DATA (if any), with END_STREAM on the last frame.
type h2Reply struct {
	blocks [][]hpack.HeaderField
	data   string
}

// framerH2 is an HTTP/2-over-TLS backend double built on x/net/http2's
// Framer, for misbehaviour a real server refuses (DATA on a 204,
// content-length on a 1xx). It returns the upstream config to reach it.
func framerH2(t *testing.T, name, prefix string, script func(method, path string) h2Reply) UpstreamConfig {
	t.Helper()
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert.TLS}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	serveConns(t, ln, func(c net.Conn) { serveFramer(c, script) })
	port := ln.Addr().(*net.TCPAddr).Port
	return UpstreamConfig{
		Config: upstream.Config{Name: name, ResponseHeaderTimeout: 5 * time.Second,
			TLS: &tls.Config{RootCAs: cert.Pool}},
		Routes: []RouteConfig{{PathPrefix: prefix}},
		Static: []upstream.Spec{{ID: "0", Scheme: "https", Host: "127.0.0.1", Port: port, Weight: 1}},
	}
}

func serveFramer(c net.Conn, script func(method, path string) h2Reply) {
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
		for i, blk := range rep.blocks {
			buf.Reset()
			for _, f := range blk {
				enc.WriteField(f)
			}
			last := i == len(rep.blocks)-1 && rep.data == ""
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: buf.Bytes(), EndHeaders: true, EndStream: last}); err != nil {
				return err
			}
		}
		if rep.data != "" {
			return fr.WriteData(id, true, []byte(rep.data))
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

// h2fields builds an HPACK field list from "name", "value" pairs.
func h2fields(kv ...string) []hpack.HeaderField {
	var out []hpack.HeaderField
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

// strictResult is what ngtcp2's client (nghttp3) received on one request
// stream: every HEADERS block, the body size, and the code the stream closed
// with (0x100 H3_NO_ERROR when nghttp3 accepted the response; nghttp3 resets
// a stream whose response breaks an RFC 9110/9114 rule).
type strictResult struct {
	blocks    []map[string][]string // one per HEADERS block; ":status" included
	bodyBytes int
	closeCode int // -1 if the stream did not close
	output    string
}

var (
	reHeader = regexp.MustCompile(`^\s*http: stream 0x[0-9a-f]+ \[([^:\]]*|:[a-z]+): (.*)\]$`)
	reStart  = regexp.MustCompile(`^\s*http: stream 0x[0-9a-f]+ response headers started`)
	reBody   = regexp.MustCompile(`^\s*http: stream 0x[0-9a-f]+ body (\d+) bytes`)
	reClose  = regexp.MustCompile(`HTTP stream \d+ closed with error code (\d+)`)
)

// strictClient runs /usr/bin/gtlsclient (ngtcp2 + nghttp3) for one request
// to the harness and parses what it printed.
func strictClient(t *testing.T, h *harness, method, path string) strictResult {
	t.Helper()
	bin, err := exec.LookPath("gtlsclient")
	if err != nil {
		// `make test` installs it (scripts/deps.sh); CI never skips the strict client.
		if os.Getenv("CI") != "" {
			t.Fatal("gtlsclient (Debian ngtcp2-client) not installed: run scripts/deps.sh")
		}
		t.Skip("gtlsclient (Debian ngtcp2-client) not installed: run scripts/deps.sh")
	}
	host, port, _ := net.SplitHostPort(h.gw.Addrs()["test"].String())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--exit-on-all-streams-close", "--no-quic-dump", "--timeout=10s",
		"-m", method, host, port, "https://localhost"+path)
	out, err := cmd.CombinedOutput()
	res := strictResult{closeCode: -1}
	var lines []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "http") || strings.Contains(line, "HTTP") {
			lines = append(lines, line)
		}
		switch {
		case reStart.MatchString(line):
			res.blocks = append(res.blocks, map[string][]string{})
		case reHeader.MatchString(line) && len(res.blocks) > 0:
			m := reHeader.FindStringSubmatch(line)
			b := res.blocks[len(res.blocks)-1]
			b[m[1]] = append(b[m[1]], m[2])
		case reBody.MatchString(line):
			n, _ := strconv.Atoi(reBody.FindStringSubmatch(line)[1])
			res.bodyBytes += n
		case reClose.MatchString(line):
			res.closeCode, _ = strconv.Atoi(reClose.FindStringSubmatch(line)[1])
		}
	}
	res.output = strings.Join(lines, "\n")
	if err != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		res.output += fmt.Sprintf("\n(gtlsclient: %v)", err)
	}
	return res
}

type hpackField = hpack.HeaderField

package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
	"golang.org/x/net/http2/hpack"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
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

// framerH2 is an upstream (name, one route under prefix) whose one backend
// is a testbackend.FramerH2 answering with script.
func framerH2(t *testing.T, name, prefix string, script func(method, path string) testbackend.H2Reply) UpstreamConfig {
	t.Helper()
	addr, roots := testbackend.FramerH2(t, script)
	return UpstreamConfig{
		Config: upstream.Config{Name: name, ResponseHeaderTimeout: 5 * time.Second,
			TLS: &tls.Config{RootCAs: roots}},
		Routes: []RouteConfig{{PathPrefix: prefix}},
		Static: []upstream.Spec{{ID: "0", Scheme: "https", Host: "127.0.0.1", Port: addr.Port, Weight: 1}},
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
	// `make test` installs it (scripts/deps.sh); CI never skips the strict client.
	bin := tool(t, "gtlsclient", "ngtcp2-client")
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

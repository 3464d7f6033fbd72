package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
	"sync"

	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
	"golang.org/x/net/http/httpguts"
)

// strictBackend is a raw HTTP/1.1 backend that checks every request the
// gateway sends it against RFC 9112 strictly (stricter than net/http's
// server, which lets a bare LF end a line): the request line, each field
// line (CRLF-ended, a token name and a valid value, no CR, LF or NUL
// inside), exactly one valid Host, no connection-specific field but the
// framing the gateway's transport adds ("Transfer-Encoding: chunked",
// "Connection: close", and "Connection: Upgrade" with Upgrade on a tunnel's
// handshake), consistent framing, and a well-formed chunked body and
// trailer section. It answers 200 "ok", or 101 to a WebSocket handshake
// (then waits for the gateway to close the tunnel). What is wrong is
// recorded, with the request's bytes.
type strictBackend struct {
	testbackend.ConnServer
	mu       sync.Mutex
	problems []string // guarded by mu
	requests int
}

func newStrictBackend() (*strictBackend, error) {
	b := &strictBackend{}
	if err := b.Listen(b.serve); err != nil {
		return nil, err
	}
	return b, nil
}

// take returns and clears the problems seen, and the number of requests.
func (b *strictBackend) take() ([]string, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, n := b.problems, b.requests
	b.problems, b.requests = nil, 0
	return p, n
}

// teeReader records what a request's bytes were, for the report.
type teeReader struct {
	r   *bufio.Reader
	raw []byte
}

func (t *teeReader) line() (string, error) {
	s, err := t.r.ReadSlice('\n')
	if len(t.raw) < 8<<10 {
		t.raw = append(t.raw, s...)
	}
	return string(s), err
}

// errBroken is a connection the gateway closed mid-request: it may (a
// client went away), and a backend can tell from the framing.
var errBroken = errors.New("connection closed mid-request")

func (b *strictBackend) serve(c net.Conn) {
	tr := &teeReader{r: bufio.NewReaderSize(c, 64<<10)}
	for {
		tr.raw = tr.raw[:0]
		upgrade, head, err := b.request(tr, c)
		switch {
		case err == io.EOF || errors.Is(err, errBroken):
			return
		case err != nil:
			b.mu.Lock()
			b.problems = append(b.problems, fmt.Sprintf("%v in %q", err, tr.raw))
			b.mu.Unlock()
			return
		}
		b.mu.Lock()
		b.requests++
		b.mu.Unlock()
		if upgrade != "" {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: "+upgrade+"\r\n\r\n")
			io.Copy(io.Discard, c) // the tunnel, until the gateway closes it
			return
		}
		answer := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
		if head {
			answer = strings.TrimSuffix(answer, "ok")
		}
		if _, err := io.WriteString(c, answer); err != nil {
			return
		}
	}
}

// request reads and checks one request; upgrade is the
// Sec-WebSocket-Accept to answer a WebSocket handshake with, head whether
// it was a HEAD.
func (b *strictBackend) request(tr *teeReader, c net.Conn) (upgrade string, head bool, err error) {
	upgrade, method, err := b.check(tr, c)
	return upgrade, method == "HEAD", err
}

func (b *strictBackend) check(tr *teeReader, c net.Conn) (upgrade, method string, err error) {
	line, err := tr.line()
	if err != nil {
		if line == "" && err == io.EOF {
			return "", "", io.EOF
		}
		return "", "", errBroken
	}
	rl, ok := strings.CutSuffix(line, "\r\n")
	method, rest, ok1 := strings.Cut(rl, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok || !ok1 || !ok2 || proto != "HTTP/1.1" || !httpguts.ValidHeaderFieldName(method) || !validRequestTarget(target) || target == "*" && method != "OPTIONS" {
		return "", "", fmt.Errorf("malformed request line %q", line)
	}
	fields, err := fieldLines(tr)
	if err != nil {
		return "", "", err
	}
	hosts := fields["Host"]
	if len(hosts) != 1 || !validAuthority(hosts[0]) || hosts[0] == "" {
		return "", "", fmt.Errorf("Host %q", hosts)
	}
	te, cl := fields["Transfer-Encoding"], fields["Content-Length"]
	conn := fields["Connection"]
	upgrading := len(conn) == 1 && conn[0] == "Upgrade"
	switch {
	case len(conn) > 1 || len(conn) == 1 && conn[0] != "close" && !upgrading:
		return "", "", fmt.Errorf("Connection %q", conn)
	case upgrading != (len(fields["Upgrade"]) > 0):
		return "", "", fmt.Errorf("Upgrade %q with Connection %q", fields["Upgrade"], conn)
	case len(te) > 1 || len(te) == 1 && te[0] != "chunked":
		return "", "", fmt.Errorf("Transfer-Encoding %q", te)
	case len(te) == 1 && len(cl) > 0:
		return "", "", fmt.Errorf("Transfer-Encoding %q with Content-Length %q", te, cl)
	case len(cl) > 1:
		return "", "", fmt.Errorf("Content-Length %q", cl)
	case len(fields["Trailer"]) > 0 && len(te) == 0:
		return "", "", fmt.Errorf("Trailer %q without a chunked body", fields["Trailer"])
	}
	for _, k := range []string{"Keep-Alive", "Proxy-Connection", "Te", "Proxy-Authorization", "Proxy-Authenticate", "Http2-Settings"} {
		if v, ok := fields[k]; ok {
			return "", "", fmt.Errorf("connection-specific %s: %q", k, v)
		}
	}
	if len(fields["Expect"]) > 0 {
		if _, err := io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
			return "", "", errBroken
		}
	}
	switch {
	case len(te) == 1:
		if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(tr.r)); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return "", "", errBroken
			}
			return "", "", fmt.Errorf("chunked body: %v", err)
		}
		if _, err := fieldLines(tr); err != nil { // the trailer section
			return "", "", err
		}
	case len(cl) == 1:
		n, err := strconv.ParseUint(cl[0], 10, 63)
		if err != nil || strings.Trim(cl[0], "0123456789") != "" {
			return "", "", fmt.Errorf("Content-Length %q", cl)
		}
		if _, err := io.CopyN(io.Discard, tr.r, int64(n)); err != nil {
			return "", "", errBroken
		}
	}
	if upgrading {
		if key := fields["Sec-Websocket-Key"]; len(key) == 1 && strings.EqualFold(fields["Upgrade"][0], "websocket") {
			return tunnel.WebSocketAccept(key[0]), method, nil
		}
	}
	return "", method, nil
}

// fieldLines reads field lines up to the empty line, strictly.
func fieldLines(tr *teeReader) (map[string][]string, error) {
	fields := map[string][]string{}
	for {
		line, err := tr.line()
		if err != nil {
			return nil, errBroken
		}
		l, ok := strings.CutSuffix(line, "\r\n")
		if !ok || strings.ContainsAny(l, "\r\n\x00") {
			return nil, fmt.Errorf("field line %q not ended by CRLF alone", line)
		}
		if l == "" {
			return fields, nil
		}
		name, value, ok := strings.Cut(l, ":")
		value = strings.Trim(value, " \t")
		if !ok || !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
			return nil, fmt.Errorf("malformed field line %q", line)
		}
		k := textproto.CanonicalMIMEHeaderKey(name)
		fields[k] = append(fields[k], value)
	}
}

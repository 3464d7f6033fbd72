package soak

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
)

// backendEnv, set to "NAME MODE", makes the test binary serve as a backend
// process (serveBackend): the soak kills real processes with SIGKILL.
// MODE is "normal", "slow" (every answer waits slowDelay), "busy" (every
// answer waits busyDelay) or "stall".
const backendEnv = "IMPULSE_SOAK_BACKEND"

const (
	downloadLen = 1 << 20 // bytes of /download
	sseEvents   = 20      // events of one /sse stream
	slowDelay   = 300 * time.Millisecond
	busyDelay   = 50 * time.Millisecond // the overload test's backends
)

// serveBackend is the backend process: HTTP/1.1 on a loopback port it
// prints ("port N") on stdout, until killed. The last path segment picks
// the answer, so one backend serves every route prefix:
//   - small: "hello from NAME";
//   - echo (POST): the hex SHA-256 of the request body;
//   - download: downloadLen pattern bytes (pattern), with Content-Length;
//   - sse: sseEvents server-sent events "data: i", 25 ms apart;
//   - ws: a WebSocket echo;
//   - big (mode stall): declares downloadLen bytes, sends 64 KiB, then
//     stalls until the client goes away.
//
// Every answer carries X-Backend: NAME.
func serveBackend(spec string) int {
	name, mode, _ := strings.Cut(spec, " ")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "backend:", err)
		return 1
	}
	fmt.Printf("port %d\n", l.Addr().(*net.TCPAddr).Port)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		if delay := modeDelay(mode); delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		kind := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		switch kind {
		case "small":
			io.WriteString(w, "hello from "+name)
		case "echo":
			sum := sha256.New()
			if _, err := io.Copy(sum, r.Body); err != nil {
				return
			}
			io.WriteString(w, hex.EncodeToString(sum.Sum(nil)))
		case "download":
			w.Header().Set("Content-Length", strconv.Itoa(downloadLen))
			_, _ = io.Copy(w, io.LimitReader(&pattern{}, downloadLen))
		case "sse":
			w.Header().Set("Content-Type", "text/event-stream")
			fl := w.(http.Flusher)
			for i := range sseEvents {
				fmt.Fprintf(w, "data: %d\n\n", i)
				fl.Flush()
				select {
				case <-time.After(25 * time.Millisecond):
				case <-r.Context().Done():
					return
				}
			}
		case "ws":
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			ctx := r.Context()
			for {
				typ, msg, err := c.Read(ctx)
				if err != nil {
					return
				}
				if err := c.Write(ctx, typ, msg); err != nil {
					return
				}
			}
		case "big":
			w.Header().Set("Content-Length", strconv.Itoa(downloadLen))
			_, _ = io.Copy(w, io.LimitReader(&pattern{}, 64<<10))
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	_ = srv.Serve(l)
	return 1
}

// modeDelay is how long a backend in mode waits before each answer.
func modeDelay(mode string) time.Duration {
	switch mode {
	case "slow":
		return slowDelay
	case "busy":
		return busyDelay
	}
	return 0
}

// pattern is an endless reader of the bytes 0, 1, ..., 250, 0, 1, ...
// (251 is prime, so a shifted or repeated chunk changes the hash).
type pattern struct{ off int64 }

func (p *pattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte((p.off + int64(i)) % 251)
	}
	p.off += int64(len(b))
	return len(b), nil
}

// downloadSHA256 is the hex SHA-256 of a whole /download body.
var downloadSHA256 = func() string {
	sum := sha256.New()
	_, _ = io.Copy(sum, io.LimitReader(&pattern{}, downloadLen))
	return hex.EncodeToString(sum.Sum(nil))
}()

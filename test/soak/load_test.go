package soak

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/quic-go/quic-go/http3"
)

// result is one finished request of the load.
type result struct {
	kind, proto string
	start, end  time.Time
	backend     string // X-Backend, once response headers arrived
	// failure is "" on success; else "reset" (the exchange broke: a
	// transport or body read error), "status N" (an unexpected status),
	// or a violation: "truncated" (a clean end with a short body) or
	// "corrupt" (a complete body that fails its check).
	failure string
	detail  string
}

// collector keeps every failure and counts successes by kind.
type collector struct {
	mu       sync.Mutex
	ok       map[string]int // "kind/proto" → successes
	failures []result
}

func (c *collector) add(r result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.failure == "" {
		c.ok[r.kind+"/"+r.proto]++
		return
	}
	c.failures = append(c.failures, r)
}

// clients holds one client per ingress protocol, trusting the soak CA.
type clients struct {
	base string // https://addr
	h1   *http.Client
	h2   *http.Client
	h3   *http.Client
	h3tr *http3.Transport
}

func newClients(addr string, tc *tls.Config) *clients {
	tcp := func(h2 bool) *http.Client {
		tr := &http.Transport{TLSClientConfig: tc.Clone(), Protocols: new(http.Protocols), MaxIdleConnsPerHost: 16}
		if h2 {
			tr.Protocols.SetHTTP2(true)
		} else {
			tr.Protocols.SetHTTP1(true)
		}
		return &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	h3tr := &http3.Transport{TLSClientConfig: tc.Clone()}
	return &clients{base: "https://" + addr, h1: tcp(false), h2: tcp(true), h3: &http.Client{Transport: h3tr, Timeout: 30 * time.Second}, h3tr: h3tr}
}

func (c *clients) of(proto string) *http.Client {
	switch proto {
	case "h1":
		return c.h1
	case "h2":
		return c.h2
	}
	return c.h3
}

func (c *clients) close() {
	c.h1.CloseIdleConnections()
	c.h2.CloseIdleConnections()
	_ = c.h3tr.Close()
}

// worker is one load loop: kind over proto, one request at a time, at
// most one start per pace.
type worker struct {
	kind, proto string
	pace        time.Duration
}

// workers is the soak's mixed load (about 330 requests per second).
var workers = []worker{
	{"get", "h1", 20 * time.Millisecond}, {"get", "h2", 20 * time.Millisecond}, {"get", "h3", 20 * time.Millisecond},
	{"get", "h3", 20 * time.Millisecond}, {"post", "h2", 40 * time.Millisecond}, {"post", "h3", 40 * time.Millisecond},
	{"post", "h1", 40 * time.Millisecond}, {"download", "h1", 100 * time.Millisecond}, {"download", "h3", 100 * time.Millisecond},
	{"download", "h2", 100 * time.Millisecond}, {"sse", "h2", 0}, {"sse", "h3", 0}, {"ws", "h1", 0},
	{"slow", "h3", 0}, {"slow", "h1", 0}, {"stall", "h1", 0},
}

// runLoad runs every worker until ctx ends.
func runLoad(ctx context.Context, cl *clients, col *collector) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				next := time.Now().Add(w.pace)
				r := do(ctx, cl, w.kind, w.proto)
				if ctx.Err() != nil && r.failure != "" {
					return // cut by the end of the load, not a failure
				}
				col.add(r)
				if d := time.Until(next); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	return &wg
}

// do runs one request of kind over proto and checks its answer.
func do(ctx context.Context, cl *clients, kind, proto string) result {
	r := result{kind: kind, proto: proto, start: time.Now()}
	defer func() { r.end = time.Now() }()
	switch kind {
	case "get":
		r.fetch(ctx, cl.of(proto), "GET", cl.base+"/api/small", nil, func(b []byte, backend string) bool {
			return string(b) == "hello from "+backend
		}, -1)
	case "slow":
		r.fetch(ctx, cl.of(proto), "GET", cl.base+"/slow/small", nil, func(b []byte, backend string) bool {
			return string(b) == "hello from "+backend
		}, -1)
	case "post":
		body := make([]byte, 4<<10+mrand.IntN(60<<10))
		_, _ = rand.Read(body)
		sum := sha256.Sum256(body)
		r.fetch(ctx, cl.of(proto), "POST", cl.base+"/api/echo", body, func(b []byte, _ string) bool {
			return string(b) == hex.EncodeToString(sum[:])
		}, -1)
	case "download":
		r.fetch(ctx, cl.of(proto), "GET", cl.base+"/api/download", nil, func(b []byte, _ string) bool {
			s := sha256.Sum256(b)
			return hex.EncodeToString(s[:]) == downloadSHA256
		}, downloadLen)
	case "stall":
		// Expected to break: the backend stalls mid-body and body_idle
		// must end it with a reset, never a clean short body.
		r.fetch(ctx, cl.of(proto), "GET", cl.base+"/stall/big", nil, func([]byte, string) bool { return false }, downloadLen)
	case "sse":
		r.sse(ctx, cl.of(proto), cl.base+"/api/sse")
	case "ws":
		r.ws(ctx, cl, "wss://"+strings.TrimPrefix(cl.base, "https://")+"/api/ws")
	}
	r.end = time.Now()
	return r
}

// fetch sends one request and checks the answer: 200, then the whole body
// (want bytes when want ≥ 0) passing check.
func (r *result) fetch(ctx context.Context, c *http.Client, method, url string, body []byte, check func([]byte, string) bool, want int) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequestWithContext(ctx, method, url, rd)
	resp, err := c.Do(req)
	if err != nil {
		r.failure, r.detail = "reset", err.Error()
		return
	}
	defer resp.Body.Close()
	r.backend = resp.Header.Get("X-Backend")
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		r.failure, r.detail = fmt.Sprintf("status %d", resp.StatusCode), resp.Header.Get("X-Impulse-Error")
		return
	}
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		r.failure, r.detail = "reset", fmt.Sprintf("after %d bytes: %v", len(b), err)
	case want >= 0 && len(b) != want:
		r.failure, r.detail = "truncated", fmt.Sprintf("%d of %d bytes, clean end", len(b), want)
	case !check(b, r.backend):
		r.failure, r.detail = "corrupt", fmt.Sprintf("%d bytes fail the check", len(b))
	}
}

// sse reads one event stream: sseEvents events "data: i" in order.
func (r *result) sse(ctx context.Context, c *http.Client, url string) {
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := c.Do(req)
	if err != nil {
		r.failure, r.detail = "reset", err.Error()
		return
	}
	defer resp.Body.Close()
	r.backend = resp.Header.Get("X-Backend")
	if resp.StatusCode != 200 {
		r.failure, r.detail = fmt.Sprintf("status %d", resp.StatusCode), resp.Header.Get("X-Impulse-Error")
		return
	}
	sc := bufio.NewScanner(resp.Body)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if line != fmt.Sprintf("data: %d", n) {
			r.failure, r.detail = "corrupt", fmt.Sprintf("event %d: %q", n, line)
			return
		}
		n++
	}
	switch {
	case sc.Err() != nil:
		r.failure, r.detail = "reset", fmt.Sprintf("after %d events: %v", n, sc.Err())
	case n != sseEvents:
		r.failure, r.detail = "truncated", fmt.Sprintf("%d of %d events, clean end", n, sseEvents)
	}
}

// ws runs one WebSocket session over HTTP/1.1: 20 messages echoed in
// order, then a normal close.
func (r *result) ws(ctx context.Context, cl *clients, url string) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: cl.h1})
	if resp != nil {
		r.backend = resp.Header.Get("X-Backend")
	}
	if err != nil {
		r.failure, r.detail = "reset", err.Error()
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			r.failure, r.detail = fmt.Sprintf("status %d", resp.StatusCode), resp.Header.Get("X-Impulse-Error")
		}
		return
	}
	defer c.CloseNow()
	for i := range 20 {
		msg := fmt.Sprintf("message %d %d", i, mrand.Int64())
		if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
			r.failure, r.detail = "reset", fmt.Sprintf("write %d: %v", i, err)
			return
		}
		_, got, err := c.Read(ctx)
		if err != nil {
			r.failure, r.detail = "reset", fmt.Sprintf("read %d: %v", i, err)
			var ce websocket.CloseError
			if errors.As(err, &ce) && ce.Code == websocket.StatusNormalClosure {
				r.failure = "truncated"
			}
			return
		}
		if string(got) != msg {
			r.failure, r.detail = "corrupt", fmt.Sprintf("echo %d: %q", i, got)
			return
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		r.failure, r.detail = "reset", "close: "+err.Error()
	}
}

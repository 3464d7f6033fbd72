package transport

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

func newH1(t *testing.T, o Options) RoundTripper {
	t.Helper()
	o.Scheme = SchemeHTTP
	rt, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.CloseIdleConnections)
	return rt
}

// get sends one request through rt and returns the status and body.
func get(t *testing.T, rt http.RoundTripper, ctx context.Context, method, url string) (int, string, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header["User-Agent"] = []string{""}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestH1DirectReusesOneConnection(t *testing.T) {
	b := testbackend.NewConnCounter(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Method+" "+r.URL.RequestURI())
	})
	rt := newH1(t, Options{})
	for i := range 20 {
		method := []string{http.MethodGet, http.MethodHead, http.MethodDelete}[i%3]
		status, body, err := get(t, rt, context.Background(), method, b.URL+"/p?q=1")
		if err != nil || status != 200 {
			t.Fatalf("request %d: %d %v", i, status, err)
		}
		if want := method + " /p?q=1"; method != http.MethodHead && body != want {
			t.Fatalf("request %d: body %q, want %q", i, body, want)
		}
	}
	if n := b.Opened.Load(); n != 1 {
		t.Fatalf("backend accepted %d connections for 20 sequential requests, want 1", n)
	}
}

func TestH1DirectBackendClosedIdleConnection(t *testing.T) {
	b := testbackend.NewConnCounter(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	rt := newH1(t, Options{})
	for i := range 5 {
		if status, _, err := get(t, rt, context.Background(), http.MethodGet, b.URL); err != nil || status != 200 {
			t.Fatalf("request %d: %d %v", i, status, err)
		}
		// The backend drops its kept-alive connection (a restart, its own
		// idle timeout); the next request must not see it.
		b.CloseClientConnections()
		waitFor(t, "the backend to close", func() bool { return b.Closed.Load() == int32(i+1) })
	}
	// The request after a POST without a body, which cannot be sent twice,
	// too: the dead connection is found before it is used.
	if status, _, err := get(t, rt, context.Background(), http.MethodPost, b.URL); err != nil || status != 200 {
		t.Fatalf("POST after the backend closed: %d %v", status, err)
	}
}

// scripted is a raw TCP backend that runs serve on each connection it
// accepts, for what a real backend cannot be made to do on demand (close
// after reading a request, send bytes after a 204, stall).
func scripted(t *testing.T, serve func(n int, c net.Conn, br *bufio.Reader)) (url string, conns *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	conns = new(atomic.Int32)
	var mu sync.Mutex
	var open []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			n := int(conns.Add(1))
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(n, c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String(), conns
}

const okResponse = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

func TestH1DirectUnansweredOnReusedConnection(t *testing.T) {
	var seen sync.Map // method -> connections it arrived on
	url, conns := scripted(t, func(n int, c net.Conn, br *bufio.Reader) {
		for i := 1; ; i++ {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			v, _ := seen.LoadOrStore(req.Method, new(atomic.Int32))
			v.(*atomic.Int32).Add(1)
			if i == 2 {
				return // read the second request, close without an answer
			}
			_, _ = io.WriteString(c, okResponse)
		}
	})
	rt := newH1(t, Options{})
	for _, m := range []string{http.MethodGet, http.MethodGet} {
		if status, _, err := get(t, rt, context.Background(), m, url); err != nil || status != 200 {
			t.Fatalf("%s: %d %v (an idempotent request is sent again on a new connection)", m, status, err)
		}
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("backend saw %d connections, want 2", n)
	}
	// Connection 2 has answered one request and closes after the next: a
	// POST is not sent again, the backend may have acted on it.
	status, _, err := get(t, rt, context.Background(), http.MethodPost, url)
	if err == nil {
		t.Fatalf("unanswered POST on a reused connection: got %d, want an error", status)
	}
	if st, reason := Classify(context.Background(), err); st != 502 || reason != ReasonReset {
		t.Fatalf("Classify(%v) = %d %s, want 502 %s", err, st, reason, ReasonReset)
	}
	if v, _ := seen.Load(http.MethodPost); v.(*atomic.Int32).Load() != 1 || conns.Load() != 2 {
		t.Fatalf("backend saw %d POSTs on %d connections, want 1 on 2 (none sent again)", v.(*atomic.Int32).Load(), conns.Load())
	}
}

func TestH1DirectUnsolicitedBytesCloseTheConnection(t *testing.T) {
	url, conns := scripted(t, func(n int, c net.Conn, br *bufio.Reader) {
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			if n == 1 {
				// A 204 with content: what follows is no response.
				_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nforge")
				continue
			}
			_, _ = io.WriteString(c, okResponse)
		}
	})
	rt := newH1(t, Options{})
	if status, _, err := get(t, rt, context.Background(), http.MethodGet, url); err != nil || status != 204 {
		t.Fatalf("first: %d %v", status, err)
	}
	status, body, err := get(t, rt, context.Background(), http.MethodGet, url)
	if err != nil || status != 200 || body != "ok" {
		t.Fatalf("second: %d %q %v, want 200 \"ok\" on a new connection", status, body, err)
	}
	if n := conns.Load(); n != 2 {
		t.Fatalf("backend saw %d connections, want 2", n)
	}
}

func TestH1DirectResponseHeaderTimeout(t *testing.T) {
	var requests atomic.Int32
	url, _ := scripted(t, func(n int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			requests.Add(1)
			if req.URL.Path == "/slow" {
				_, _ = br.ReadByte() // stall until the gateway closes
				return
			}
			_, _ = io.WriteString(c, okResponse)
		}
	})
	rt := newH1(t, Options{ResponseHeaderTimeout: 50 * time.Millisecond})
	// On a fresh connection, and on a reused one: a timed-out request
	// reached the backend, so it is never sent again (the helper trial saw
	// a GET sent twice and its 504 come after twice the timeout).
	for _, warm := range []bool{false, true} {
		requests.Store(0)
		if warm {
			if _, _, err := get(t, rt, context.Background(), http.MethodGet, url+"/warm"); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := get(t, rt, context.Background(), http.MethodGet, url+"/slow")
		if st, reason := Classify(context.Background(), err); st != 504 || reason != ReasonResponseTimeout {
			t.Fatalf("warm %v: Classify(%v) = %d %s, want 504 %s", warm, err, st, reason, ReasonResponseTimeout)
		}
		if want := map[bool]int32{false: 1, true: 2}[warm]; requests.Load() != want {
			t.Fatalf("warm %v: backend got %d requests, want %d (the timed-out one once)", warm, requests.Load(), want)
		}
	}
}

func TestH1DirectCancelEndsABlockedBody(t *testing.T) {
	closed := make(chan struct{})
	url, _ := scripted(t, func(n int, c net.Conn, br *bufio.Reader) {
		_, _ = http.ReadRequest(br)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart")
		_, _ = br.ReadByte() // returns when the gateway closes
		close(closed)
	})
	rt := newH1(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := resp.Body.Read(buf); done <- err }()
	cancel()
	if err := <-done; err == nil {
		t.Fatal("Read after cancel returned no error")
	}
	<-closed
	resp.Body.Close()
}

func TestH1DirectIdleTimeoutAndCloseIdle(t *testing.T) {
	b := testbackend.NewConnCounter(t, func(w http.ResponseWriter, r *http.Request) {})
	rt := newH1(t, Options{IdleTimeout: 50 * time.Millisecond})
	if _, _, err := get(t, rt, context.Background(), http.MethodGet, b.URL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the idle connection to be closed", func() bool { return b.Closed.Load() == 1 })

	rt = newH1(t, Options{})
	if _, _, err := get(t, rt, context.Background(), http.MethodGet, b.URL); err != nil {
		t.Fatal(err)
	}
	rt.CloseIdleConnections()
	waitFor(t, "CloseIdleConnections to close it", func() bool { return b.Closed.Load() == 2 })
}

func TestH1DirectRefusesWhatNetHTTPRefuses(t *testing.T) {
	b := testbackend.NewConnCounter(t, func(w http.ResponseWriter, r *http.Request) {})
	rt := newH1(t, Options{})
	for name, mod := range map[string]func(*http.Request){
		"field value": func(r *http.Request) { r.Header["X-A"] = []string{"a\r\nX-Injected: 1"} },
		"field name":  func(r *http.Request) { r.Header["X A"] = []string{"1"} },
		"method":      func(r *http.Request) { r.Method = "GE T" },
	} {
		req, _ := http.NewRequest(http.MethodGet, b.URL, nil)
		mod(req)
		_, err := rt.RoundTrip(req)
		if !IsUnsendable(err) {
			t.Errorf("%s: err %v, want an unsendable error", name, err)
		}
	}
	if n := b.Opened.Load(); n > 1 {
		t.Fatalf("backend accepted %d connections for requests never sent", n)
	}
}

func TestH1DirectBodiesAndUpgradesUseNetHTTP(t *testing.T) {
	b := testbackend.NewConnCounter(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Header.Get("Upgrade")+string(body))
	})
	rt := newH1(t, Options{})
	req, _ := http.NewRequest(http.MethodPost, b.URL, strings.NewReader("payload"))
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(got) != "payload" {
		t.Fatalf("POST body echoed %q", got)
	}
	if !direct(&http.Request{Method: "GET", URL: req.URL, Header: http.Header{}}) {
		t.Fatal("a GET without a body is not direct")
	}
	for name, r := range map[string]*http.Request{
		"body":    {Method: "POST", URL: req.URL, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("x"))},
		"upgrade": {Method: "GET", URL: req.URL, Header: http.Header{"Upgrade": {"websocket"}}},
		"connect": {Method: "CONNECT", URL: req.URL, Header: http.Header{}},
		"trailer": {Method: "GET", URL: req.URL, Header: http.Header{}, Trailer: http.Header{"X": nil}},
	} {
		if direct(r) {
			t.Errorf("%s: direct, want net/http's Transport", name)
		}
	}
}

func TestH1DirectInterimResponses(t *testing.T) {
	url, _ := scripted(t, func(n int, c net.Conn, br *bufio.Reader) {
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </b>\r\n\r\n"+okResponse)
		}
	})
	rt := newH1(t, Options{})
	var links []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		links = append(links, h.Get("Link"))
		return nil
	}}
	status, body, err := get(t, rt, httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, url)
	if err != nil || status != 200 || body != "ok" || strings.Join(links, ",") != "</a>,</b>" {
		t.Fatalf("got %d %q %v, 1xx links %q", status, body, err, links)
	}
	stop := errors.New("enough")
	trace.Got1xxResponse = func(int, textproto.MIMEHeader) error { return stop }
	if _, _, err := get(t, rt, httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, url); !errors.Is(err, stop) {
		t.Fatalf("a trace's error: got %v, want it returned", err)
	}
}

func TestH1DirectReuseAfterTheHeaderDeadlinePassed(t *testing.T) {
	b := testbackend.NewConnCounter(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	rt := newH1(t, Options{ResponseHeaderTimeout: 20 * time.Millisecond})
	for i := range 3 {
		if status, body, err := get(t, rt, context.Background(), http.MethodGet, b.URL); err != nil || status != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q %v", i, status, body, err)
		}
		// The small body came with the headers, so their read deadline was
		// left set; idling past it must not cost the connection.
		time.Sleep(40 * time.Millisecond)
	}
	if n := b.Opened.Load(); n != 1 {
		t.Fatalf("backend accepted %d connections, want 1", n)
	}
}

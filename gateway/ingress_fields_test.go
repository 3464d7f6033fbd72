package gateway

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// tlsH1 sends raw HTTP/1.1 requests over TLS to h and reads one response
// each, for what net/http's client would not send.
func tlsH1(t *testing.T, h *harness, raw string) *http.Response {
	t.Helper()
	c, err := tls.Dial("tcp", h.gw.Addrs()["test"].String(), &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp
}

// TestB11ConnectionSpecificFieldsOverH1: over the HTTP/1.1 ingress the
// connection-specific fields a client may legitimately send (RFC 9110
// §7.6.1) are removed, with the fields Connection names; te: trailers
// reaches HTTP/2 backends only; the backend's own never reach the client.
func TestB11ConnectionSpecificFieldsOverH1(t *testing.T) {
	var mu sync.Mutex
	var seen http.Header
	bothProtocols(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Connection", "X-Hop")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Hop", "1")
		io.WriteString(w, "chunk1;")
		w.(http.Flusher).Flush()
		io.WriteString(w, "chunk2")
	}, func(t *testing.T, h *harness) {
		resp := tlsH1(t, h, "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\n"+
			"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nHTTP2-Settings: AAMAAABkAARAAAAA\r\nX-End: kept\r\n\r\n")
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "chunk1;chunk2" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		mu.Lock()
		defer mu.Unlock()
		// HTTP2-Settings is connection-specific (RFC 7540 §3.2.1) even when
		// Connection does not name it (FuzzIngress).
		for _, k := range []string{"Connection", "X-Secret", "Keep-Alive", "Proxy-Connection", "Http2-Settings"} {
			if v, ok := seen[k]; ok {
				t.Errorf("backend got %s: %q", k, v)
			}
		}
		wantTE := map[string]string{"h1": "", "h2": "trailers"}[t.Name()[strings.LastIndex(t.Name(), "/")+1:]]
		if got := strings.Join(seen.Values("Te"), ","); got != wantTE {
			t.Errorf("backend got te %q, want %q", got, wantTE)
		}
		if seen.Get("X-End") != "kept" {
			t.Error("an end-to-end field was lost")
		}
		for _, k := range []string{"Keep-Alive", "X-Hop"} {
			if v := resp.Header.Get(k); v != "" && !(k == "X-Hop" && strings.HasSuffix(t.Name(), "h2")) {
				t.Errorf("client got %s: %q", k, v)
			}
		}
	})
}

// TestH1AbsoluteFormAndChunkedClose: the absolute form of the
// request-target is accepted (its authority wins over Host), other schemes
// are refused, and a chunked request (which may have carried a
// Content-Length Go's server dropped) closes the connection after its
// response, so nothing pipelined behind it is read (RFC 9112 §3.2.2, §6.1).
func TestH1AbsoluteFormAndChunkedClose(t *testing.T) {
	var mu sync.Mutex
	var got []string
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Host+" "+r.URL.RequestURI())
		mu.Unlock()
	}))
	h := newHarnessOver(t, ProtocolH1, staticUpstream("u", "/", be))
	resp := tlsH1(t, h, "GET https://app.test:8443/abs/p?q=1 HTTP/1.1\r\nHost: other\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Errorf("absolute form: %d %s", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
	}
	if resp := tlsH1(t, h, "GET ftp://app.test/x HTTP/1.1\r\nHost: app.test\r\n\r\n"); resp.StatusCode != 400 {
		t.Errorf("ftp target: %d", resp.StatusCode)
	}
	smuggle := "POST /clte HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
		"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	if resp := tlsH1(t, h, smuggle); !resp.Close {
		t.Errorf("a chunked request did not close the connection: %v", resp.Header)
	}
	eventually(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 2 }, "the requests to arrive")
	mu.Lock()
	defer mu.Unlock()
	if got[0] != "app.test:8443 /abs/p?q=1" || len(got) != 2 || got[1] != "x /clte" {
		t.Errorf("backend got %q", got)
	}
}

// TestH1MalformedChunkedBodyIs400: over HTTP/1.1 a chunked body that breaks
// its framing gets a 400 client_body_malformed on the wire (what the
// metrics count) and the connection closes.
func TestH1MalformedChunkedBodyIs400(t *testing.T) {
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) }))
	h := newHarnessOver(t, ProtocolH1, staticUpstream("u", "/", be))
	for _, body := range []string{"zz\r\nabc\r\n0\r\n\r\n", "3\r\nabcX\r\n0\r\n\r\n"} {
		resp := tlsH1(t, h, "POST /x HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"+body)
		if resp.StatusCode != 400 || resp.Header.Get("X-Impulse-Error") != "client_body_malformed" || !resp.Close {
			t.Errorf("%q: %d %q close %v", body, resp.StatusCode, resp.Header.Get("X-Impulse-Error"), resp.Close)
		}
	}
}

// TestH1ClientGetsTrailersOfALengthBody: an HTTP/2 backend's trailers after
// a body with Content-Length reach an HTTP/1.1 client, sent chunked (only a
// chunked body has a trailer section, RFC 9112 §7.1.2).
func TestH1ClientGetsTrailersOfALengthBody(t *testing.T) {
	be := testbackend.NewH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		w.Header().Set("Content-Length", "4")
		io.WriteString(w, "body")
		w.Header().Set("X-Sum", "abc")
	}))
	h := newHarnessOver(t, ProtocolH1, staticUpstream("u", "/", be))
	resp := h.get("/")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "body" || resp.Trailer.Get("X-Sum") != "abc" {
		t.Errorf("body %q, trailers %v", body, resp.Trailer)
	}
}

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
			"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nX-End: kept\r\n\r\n")
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != "chunk1;chunk2" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range []string{"Connection", "X-Secret", "Keep-Alive", "Proxy-Connection"} {
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

package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

func named(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		io.WriteString(w, name)
	})
}

func TestNoRouteIs404(t *testing.T) {
	h := newHarness(t, staticUpstream("api", "/api", testbackend.NewH1(t, named("a"))))
	resp := h.get("/other")
	defer resp.Body.Close()
	if resp.StatusCode != 404 || resp.Header.Get("X-Impulse-Error") != "no_route" {
		t.Fatalf("got %d %q, want 404 no_route", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
	}
}

// TestB03NoFallThrough: a route whose upstream has no backend answers 503
// and never falls through to a shorter prefix.
func TestB03NoFallThrough(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		var uiHits atomic.Int64
		ui := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { uiHits.Add(1) }))
		api := UpstreamConfig{Config: upstream.Config{Name: "sales-api", Discovered: true}, Routes: []RouteConfig{{PathPrefix: "/sales/api"}}}
		h := newHarnessOver(t, ingress, staticUpstream("sales-ui", "/sales", ui), api)

		resp := h.get("/sales/api/orders")
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("X-Impulse-Error") != "discovery_pending" {
			t.Fatalf("pending: got %d %q, want 503 discovery_pending", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
		}
		if err := h.gw.SetDiscovered("sales-api", nil); err != nil {
			t.Fatal(err)
		}
		resp = h.get("/sales/api/orders")
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("X-Impulse-Error") != "no_healthy_backend" {
			t.Fatalf("empty: got %d %q, want 503 no_healthy_backend", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
		}
		if n := uiHits.Load(); n != 0 {
			t.Fatalf("sales-ui received %d requests, want 0", n)
		}
	})
}

func TestForwardHeaders(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
			var got *http.Request
			var mu sync.Mutex
			hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				got = r.Clone(context.Background())
				mu.Unlock()
				w.Header().Set("Connection", "X-Hop")
				w.Header().Set("X-Hop", "secret")
				w.Header().Set("Keep-Alive", "timeout=5")
				w.Header().Set("X-End", "kept")
				io.WriteString(w, r.Proto)
			})
			be := backendOver(t, proto, hf)
			h := newHarnessOver(t, ingress, staticUpstream("u", "/", be))
			req, _ := http.NewRequest("GET", h.base+"/p/a%3Fb?q=1&r=2", nil)
			req.Host = "app.example.com"
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			req.Header["User-Agent"] = []string{""} // quic-go then sends none
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			wantProto := map[string]string{"h1": "HTTP/1.1", "h2": "HTTP/2.0"}[proto]
			if string(body) != wantProto {
				t.Errorf("backend saw %q, want %q", body, wantProto)
			}
			mu.Lock()
			defer mu.Unlock()
			if got.Host != "app.example.com" {
				t.Errorf("Host = %q", got.Host)
			}
			if got.URL.RawQuery != "q=1&r=2" || got.URL.EscapedPath() != "/p/a%3Fb" {
				t.Errorf("path/query = %q ? %q", got.URL.EscapedPath(), got.URL.RawQuery)
			}
			if xff := got.Header.Get("X-Forwarded-For"); xff != "203.0.113.9, 127.0.0.1" {
				t.Errorf("X-Forwarded-For = %q", xff)
			}
			if ua, ok := got.Header["User-Agent"]; ok {
				t.Errorf("backend got User-Agent %q, the client sent none", ua)
			}
			if got.Header.Get("X-Forwarded-Proto") != "https" {
				t.Errorf("X-Forwarded-Proto = %q", got.Header.Get("X-Forwarded-Proto"))
			}
			hop := []string{"Connection", "Keep-Alive"}
			if proto == "h1" { // HTTP/2 servers drop Connection themselves (RFC 9113 §8.2.2)
				hop = append(hop, "X-Hop")
			}
			for _, k := range hop {
				if v := resp.Header.Get(k); v != "" {
					t.Errorf("response carried hop-by-hop %s: %q", k, v)
				}
			}
			if resp.Header.Get("X-End") != "kept" {
				t.Errorf("end-to-end header lost")
			}
		})
	})
}

func TestRoundRobinAndMembership(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		a, b, c := testbackend.NewH1(t, named("a")), testbackend.NewH1(t, named("b")), testbackend.NewH1(t, named("c"))
		uc := UpstreamConfig{Config: upstream.Config{Name: "web", Discovered: true}, Routes: []RouteConfig{{PathPrefix: "/"}}}
		h := newHarnessOver(t, ingress, uc)
		set := func(servers ...*httptest.Server) {
			var specs []upstream.Spec
			for _, s := range servers {
				specs = append(specs, specFor(s.URL, s))
			}
			if err := h.gw.SetDiscovered("web", specs); err != nil {
				t.Fatal(err)
			}
		}
		count := func(n int) map[string]int {
			m := map[string]int{}
			for i := 0; i < n; i++ {
				resp := h.get("/")
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
				m[string(body)]++
			}
			return m
		}
		set(a, b)
		if m := count(100); m["a"] != 50 || m["b"] != 50 {
			t.Fatalf("round robin over a,b: %v", m)
		}
		set(a, b, c)
		if m := count(99); m["a"] != 33 || m["b"] != 33 || m["c"] != 33 {
			t.Fatalf("round robin over a,b,c: %v", m)
		}
		set(b, c)
		if m := count(50); m["a"] != 0 {
			t.Fatalf("removed backend a still got traffic: %v", m)
		}
	})
}

func TestBackendErrors(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		closed := testbackend.NewH1(t, named("x"))
		closed.Close()
		slow := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}))
		refused := staticUpstream("refused", "/refused", closed)
		timeout := staticUpstream("slow", "/slow", slow)
		timeout.ResponseHeaderTimeout = 100 * time.Millisecond
		h := newHarnessOver(t, ingress, refused, timeout)
		for _, c := range []struct {
			path   string
			status int
			reason string
		}{
			{"/refused", 502, "backend_connect_failed"},
			{"/slow", 504, "response_header_timeout"},
		} {
			resp := h.get(c.path)
			resp.Body.Close()
			if resp.StatusCode != c.status || resp.Header.Get("X-Impulse-Error") != c.reason {
				t.Errorf("%s: got %d %q, want %d %q", c.path, resp.StatusCode, resp.Header.Get("X-Impulse-Error"), c.status, c.reason)
			}
		}
	})
}

func TestTLSVerificationIsOn(t *testing.T) {
	be := testbackend.NewH2(t, named("a"))
	uc := staticUpstream("u", "/", be)
	uc.TLS = nil // system roots: the test certificate is not trusted
	h := newHarness(t, uc)
	resp := h.get("/")
	resp.Body.Close()
	if resp.StatusCode != 502 || resp.Header.Get("X-Impulse-Error") != "backend_tls_failed" {
		t.Fatalf("got %d %q, want 502 backend_tls_failed", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
	}
}

// TestMidBodyFailureResetsStream: a backend that dies after sending part of
// a body must never look like a complete response to the client.
func TestMidBodyFailureResetsStream(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1000000")
			w.WriteHeader(200)
			w.Write(bytes.Repeat([]byte("x"), 1000))
			w.(http.Flusher).Flush()
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}))
		h := newHarnessOver(t, ingress, staticUpstream("u", "/", be))
		// QUIC may discard unsent data on RESET_STREAM (RFC 9000 §3.2), so the
		// reset can arrive before or after the headers; either way the client
		// must see an error, never a clean end.
		resp, err := h.client.Get(h.base + "/")
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if _, err := io.ReadAll(resp.Body); err == nil {
			t.Fatal("truncated body ended cleanly; want a stream error")
		}
	})
}

func TestStreamingBodiesBothWays(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
			echo := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				hsh := sha256.New()
				n, err := io.Copy(hsh, r.Body)
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				w.Header().Set("X-Upload-Sha256", hex.EncodeToString(hsh.Sum(nil)))
				w.Header().Set("X-Upload-Bytes", strconv.FormatInt(n, 10))
				io.Copy(w, io.LimitReader(newRand(7), 8<<20))
			})
			be := backendOver(t, proto, echo)
			h := newHarnessOver(t, ingress, staticUpstream("u", "/", be))
			const size = 8 << 20
			up := sha256.New()
			resp, err := h.client.Post(h.base+"/upload", "application/octet-stream", io.TeeReader(io.LimitReader(newRand(3), size), up))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			down := sha256.New()
			n, err := io.Copy(down, resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Header.Get("X-Upload-Sha256"); got != hex.EncodeToString(up.Sum(nil)) {
				t.Errorf("upload hash mismatch (%s bytes arrived)", resp.Header.Get("X-Upload-Bytes"))
			}
			want := sha256.New()
			io.Copy(want, io.LimitReader(newRand(7), 8<<20))
			if n != 8<<20 || !bytes.Equal(down.Sum(nil), want.Sum(nil)) {
				t.Errorf("download mismatch: %d bytes", n)
			}
		})
	})
}

func TestResponseTrailers(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Checksum")
			io.WriteString(w, "body")
			w.Header().Set("X-Checksum", "abc")
		}))
		h := newHarnessOver(t, ingress, staticUpstream("u", "/", be))
		resp := h.get("/")
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != "body" {
			t.Fatalf("body %q err %v", body, err)
		}
		if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
			t.Fatalf("trailer X-Checksum = %q, want abc (trailers %v)", got, resp.Trailer)
		}
	})
}

// TestNoInventedContentType: a backend response without Content-Type reaches
// the client without one (the HTTP/3 writer would otherwise sniff a type).
func TestNoInventedContentType(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = nil
			io.WriteString(w, "<html>ok</html>")
		}))
		h := newHarnessOver(t, ingress, staticUpstream("u", "/", be))
		resp := h.get("/")
		resp.Body.Close()
		if ct, ok := resp.Header["Content-Type"]; ok {
			t.Fatalf("Content-Type %q added by the gateway", ct)
		}
	})
}

// TestTLSHandshakeFailureReason: an https backend that does not speak TLS is
// a 502 backend_tls_failed, not a connect failure.
func TestTLSHandshakeFailureReason(t *testing.T) {
	plain := testbackend.NewH1(t, named("plain"))
	uc := staticUpstream("u", "/", plain)
	uc.Static[0].Scheme = "https"
	h := newHarness(t, uc)
	resp := h.get("/")
	resp.Body.Close()
	if resp.StatusCode != 502 || resp.Header.Get("X-Impulse-Error") != "backend_tls_failed" {
		t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
	}
}

// TestDrainTimeoutCancelsRequests: when drain_timeout runs out, clients see
// their request cut, never a clean end: H3_REQUEST_CANCELLED on HTTP/3 (not a
// clean H3_NO_ERROR close), a closed connection on HTTP/1.1 and HTTP/2.
func TestDrainTimeoutCancelsRequests(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		started := make(chan struct{})
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "12345")
			w.(http.Flusher).Flush()
			close(started)
			<-r.Context().Done()
		}))
		h := newHarnessOver(t, ingress, staticUpstream("u", "/", be))
		errc := make(chan error, 1)
		go func() {
			resp, err := h.client.Get(h.base + "/")
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			errc <- err
		}()
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		h.gw.Shutdown(ctx)
		err := <-errc
		if ingress != ProtocolH3 {
			if err == nil {
				t.Fatal("a request cut by drain_timeout ended cleanly")
			}
			return
		}
		var ae *quic.ApplicationError
		if !errors.As(err, &ae) || ae.ErrorCode != quic.ApplicationErrorCode(http3.ErrCodeRequestCanceled) {
			t.Fatalf("client saw %v, want H3_REQUEST_CANCELLED", err)
		}
	})
}

// TestGETWithBodyIsForwarded: a GET with a body of unknown length (HTTP/3
// without Content-Length) still reaches the backend whole, and a GET
// without one is sent without a body.
func TestGETWithBodyIsForwarded(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%d:%s:%v", r.ContentLength, b, r.TransferEncoding)
		}))
		h := newHarnessOver(t, ingress, staticUpstream("u", "/", be))
		req, _ := http.NewRequest("GET", h.base+"/search", io.NopCloser(strings.NewReader(`{"query":{}}`)))
		req.ContentLength = -1
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `{"query":{}}`) {
			t.Fatalf("GET body not forwarded: %q", body)
		}
		resp = h.get("/plain")
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "0::[]" {
			t.Fatalf("GET without body arrived as %q", body)
		}
	})
}

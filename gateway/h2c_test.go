package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// h2cSpec is the h2c:// backend spec of a server listening on addr.
func h2cSpec(id, addr string) upstream.Spec {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	return upstream.Spec{ID: id, Scheme: transport.SchemeH2C, Host: host, Port: p, Weight: 1}
}

// h2cUpstream routes every path to h2c backends at addrs.
func h2cUpstream(addrs ...string) UpstreamConfig {
	uc := UpstreamConfig{Config: upstream.Config{Name: "grpc", ResponseHeaderTimeout: 5 * time.Second}, Routes: []RouteConfig{{PathPrefix: "/"}}}
	for i, a := range addrs {
		uc.Static = append(uc.Static, h2cSpec(strconv.Itoa(i), a))
	}
	return uc
}

// TestH2CBackend: an h2c:// backend is reached over cleartext HTTP/2 from
// every ingress protocol: it sees ProtoMajor 2 without TLS and the client's
// "te: trailers"; a POST body arrives whole, the response streams (the
// second chunk is written only once the client has read the first) and its
// trailers reach the client; /v1/backends reports protocol h2c.
func TestH2CBackend(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		var mu sync.Mutex
		var proto []string
		var te []string
		release := make(chan struct{})
		be := testbackend.NewH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			proto = append(proto, r.Proto+" tls="+strconv.FormatBool(r.TLS != nil))
			te = r.Header.Values("Te")
			mu.Unlock()
			switch r.URL.Path {
			case "/echo":
				b, _ := io.ReadAll(r.Body)
				w.Header().Set("Trailer", "X-Length")
				w.Write(b)
				w.Header().Set("X-Length", strconv.Itoa(len(b)))
			case "/stream":
				io.WriteString(w, "first;")
				w.(http.Flusher).Flush()
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				io.WriteString(w, "second")
			default:
				io.WriteString(w, "hello")
			}
		}))
		h := newHarnessOver(t, ingress, h2cUpstream(be.Listener.Addr().String()))

		req, _ := http.NewRequest("GET", h.base+"/", nil)
		req.Header.Set("Te", "trailers")
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "hello" {
			t.Fatalf("GET: %d %q", resp.StatusCode, body)
		}
		mu.Lock()
		if len(proto) != 1 || proto[0] != "HTTP/2.0 tls=false" {
			t.Errorf("backend saw %v, want HTTP/2.0 without TLS", proto)
		}
		if strings.Join(te, ",") != "trailers" {
			t.Errorf("backend got te %q, want trailers", te)
		}
		mu.Unlock()

		payload := bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16+7) // > coalesceBytes, not a round size
		resp, err = h.client.Post(h.base+"/echo", "application/octet-stream", bytes.NewReader(payload))
		if err != nil {
			t.Fatal(err)
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Equal(body, payload) {
			t.Fatalf("POST: %d, %d bytes back of %d", resp.StatusCode, len(body), len(payload))
		}
		if got := resp.Trailer.Get("X-Length"); got != strconv.Itoa(len(payload)) {
			t.Errorf("trailer X-Length = %q, want %d", got, len(payload))
		}

		resp = h.get("/stream")
		first := make([]byte, len("first;"))
		if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first;" {
			t.Fatalf("first chunk %q: %v", first, err)
		}
		close(release)
		rest, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(rest) != "second" {
			t.Fatalf("rest %q: %v", rest, err)
		}

		for _, bi := range h.gw.Backends() {
			if bi.Protocol != "h2c" || bi.Address != "h2c://"+be.Listener.Addr().String() {
				t.Errorf("backend info %+v, want protocol h2c", bi)
			}
		}
	})
}

// TestH2CActiveCheck: the active check of an h2c:// backend runs over
// cleartext HTTP/2; a failing check makes it unhealthy (503
// no_healthy_backend), a passing one brings it back.
func TestH2CActiveCheck(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		var healthy atomic.Bool
		healthy.Store(true)
		var checks, nonH2 atomic.Int64
		be := testbackend.NewH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" {
				checks.Add(1)
				if r.ProtoMajor != 2 || r.TLS != nil {
					nonH2.Add(1)
				}
				if !healthy.Load() {
					w.WriteHeader(503)
				}
				return
			}
			io.WriteString(w, "ok")
		}))
		uc := h2cUpstream(be.Listener.Addr().String())
		uc.Active = &health.ActiveConfig{Path: "/health", Interval: 20 * time.Millisecond, Timeout: time.Second,
			HealthyThreshold: 1, UnhealthyThreshold: 2, UnknownIsHealthy: false}
		h := newHarnessOver(t, ingress, uc)
		eventually(t, 5*time.Second, func() bool {
			bi := h.gw.Backends()
			return len(bi) == 1 && bi[0].Health == "healthy" && bi[0].Eligible
		}, "the h2c backend healthy by its active check")
		resp := h.get("/")
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("healthy: %d", resp.StatusCode)
		}
		healthy.Store(false)
		eventually(t, 5*time.Second, func() bool {
			bi := h.gw.Backends()
			return len(bi) == 1 && !bi[0].Eligible && bi[0].HealthReason == "status 503"
		}, "the h2c backend unhealthy")
		resp = h.get("/")
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("X-Impulse-Error") != transport.ReasonNoBackend {
			t.Fatalf("unhealthy: %d %q", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
		}
		healthy.Store(true)
		eventually(t, 5*time.Second, func() bool {
			bi := h.gw.Backends()
			return len(bi) == 1 && bi[0].Eligible
		}, "the h2c backend healthy again")
		if checks.Load() == 0 || nonH2.Load() != 0 {
			t.Fatalf("%d checks, %d not over cleartext HTTP/2", checks.Load(), nonH2.Load())
		}
	})
}

// TestH2CConnectFailure: an h2c:// backend that refuses connections gives
// 502 backend_connect_failed, as for the other schemes.
func TestH2CConnectFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	h := newHarness(t, h2cUpstream(addr))
	resp := h.get("/")
	resp.Body.Close()
	if resp.StatusCode != 502 || resp.Header.Get("X-Impulse-Error") != transport.ReasonConnect {
		t.Fatalf("got %d %q, want 502 %s", resp.StatusCode, resp.Header.Get("X-Impulse-Error"), transport.ReasonConnect)
	}
}

// TestH2CGracefulGoAwayReplays: an h2c backend that sends GOAWAY(NO_ERROR)
// after eight streams per connection (allowing 16 at once) leaves later streams unprocessed; the
// gateway sends them again, POST bodies included, so 24 concurrent POSTs all
// succeed and each reaches the backend whole.
func TestH2CGracefulGoAwayReplays(t *testing.T) {
	fb, addr := testbackend.NewH2CFrameBackend(t, 8, 16)
	uc := h2cUpstream(addr)
	uc.ResponseHeaderTimeout = 2 * time.Minute // x/net/http2 backs off before a second replay
	uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
	h := newHarnessOver(t, ProtocolH2, uc)
	body := bytes.Repeat([]byte("x"), 2048)
	var wg sync.WaitGroup
	var failed atomic.Int64
	// The bodies are held back until every request is in flight at the
	// backend, so that streams are open above the GOAWAY's last-stream-id.
	start := make(chan struct{})
	for range 24 {
		wg.Go(func() {
			pr, pw := io.Pipe()
			go func() {
				<-start
				pw.Write(body)
				pw.Close()
			}()
			req, _ := http.NewRequest("POST", h.base+"/goaway", pr)
			req.ContentLength = int64(len(body))
			resp, err := h.client.Do(req)
			if err != nil {
				t.Log(err)
				failed.Add(1)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Logf("status %d %s", resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
				failed.Add(1)
			}
		})
	}
	eventually(t, 10*time.Second, func() bool {
		bi := h.gw.Backends()
		return len(bi) == 1 && bi[0].InFlight == 24
	}, "24 requests in flight")
	close(start)
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatalf("%d of 24 POSTs failed", failed.Load())
	}
	for _, st := range fb.Answered() {
		if st.Body != len(body) {
			t.Errorf("a POST reached the backend with %d of %d body bytes", st.Body, len(body))
		}
	}
	t.Logf("answered %d, left unprocessed %d", len(fb.Answered()), len(fb.Unprocessed()))
	for _, bi := range h.gw.Backends() {
		if bi.Ejected || !bi.Eligible {
			t.Errorf("a graceful GOAWAY counted against the h2c backend: %+v", bi)
		}
	}
}

package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestB23UnsafeRequestsAreNotReplayed: a POST whose backend resets after
// reading the body is a 502 and no other backend sees it, with the default
// retry policy and with every opt-in condition on; a GET that fails the
// same way is retried on the other backend, "reset" being in the default
// `on`.
func TestB23UnsafeRequestsAreNotReplayed(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		for _, tc := range []struct {
			name   string
			policy retry.Policy
			method string
			want   int
			tries  int64
		}{
			{"POST, default policy", retry.Policy{}, "POST", 502, 1},
			{"POST, every condition", retryOn(2, retry.ConnectFailure, retry.RefusedStream, retry.Reset, retry.Status502, retry.Status503, retry.Status504), "POST", 502, 1},
			{"PATCH, every condition", retryOn(2, retry.Reset, retry.Status502), "PATCH", 502, 1},
			{"GET, default policy", retry.Policy{}, "GET", 502, 2},
			{"GET, on reset", retryOn(2, retry.Reset), "GET", 502, 2},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var hits atomic.Int64
				reset := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					io.Copy(io.Discard, r.Body)
					if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
						c.Close()
					}
				})
				uc := staticUpstream("u", "/", testbackend.NewH1(t, reset), testbackend.NewH1(t, reset))
				uc.Retry = tc.policy
				h := newHarnessOver(t, ingress, uc)
				req, _ := http.NewRequest(tc.method, h.base+"/orders", strings.NewReader("order"))
				resp, err := h.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tc.want || hits.Load() != tc.tries {
					t.Fatalf("status %d after %d backend attempts; want %d after exactly %d", resp.StatusCode, hits.Load(), tc.want, tc.tries)
				}
			})
		}
	})
}

// TestL03InFlightReturnsToZero: with least_request, requests canceled by the
// client mid-response and requests failing at the backend leave every
// backend's in-flight count at 0.
func TestL03InFlightReturnsToZero(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/fail":
				if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
					c.Close()
				}
			case "/slow":
				w.Write(make([]byte, 1024))
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-time.After(5 * time.Second):
				}
			default:
				io.WriteString(w, "ok")
			}
		})
		uc := staticUpstream("u", "/", testbackend.NewH1(t, handler), testbackend.NewH1(t, handler), testbackend.NewH1(t, handler))
		uc.LoadBalancing = "least_request"
		uc.Retry = retryOn(1) // one try each: the count below is of requests, not retries
		h := newHarnessOver(t, ingress, uc)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i := 0; i < 300; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				path := []string{"/ok", "/fail", "/slow"}[i%3]
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", h.base+path, nil)
				resp, err := h.client.Do(req)
				if err != nil {
					return
				}
				if path == "/slow" {
					io.ReadFull(resp.Body, make([]byte, 512))
					cancel() // client goes away mid-response
				} else {
					io.Copy(io.Discard, resp.Body)
				}
				resp.Body.Close()
			}()
		}
		wg.Wait()
		eventually(t, 5*time.Second, func() bool {
			for _, b := range h.gw.Backends() {
				if b.InFlight != 0 {
					return false
				}
			}
			return true
		}, "in-flight counts back to 0")
		var total uint64
		for _, b := range h.gw.Backends() {
			if b.Requests == 0 {
				t.Errorf("backend %s starved", b.ID)
			}
			total += b.Requests
		}
		if total != 300 {
			out, _ := json.Marshal(h.gw.Backends())
			t.Fatalf("%d requests reached backends, want 300: %s", total, out)
		}
	})
}

// TestRemovedBackendConnectionsClose: once a backend leaves its upstream
// and its last request ends, the gateway closes its pooled connections (no
// connection leak towards removed instances).
func TestRemovedBackendConnectionsClose(t *testing.T) {
	var open atomic.Int64
	be := httptest.NewUnstartedServer(named("a"))
	be.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	be.Start()
	t.Cleanup(be.Close)
	other := testbackend.NewH1(t, named("b"))
	uc := UpstreamConfig{Config: upstream.Config{Name: "web", Discovered: true}, Routes: []RouteConfig{{PathPrefix: "/"}}}
	h := newHarness(t, uc)
	if err := h.gw.SetDiscovered("web", []upstream.Spec{specFor("a", be), specFor("b", other)}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		resp := h.get("/")
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if open.Load() == 0 {
		t.Fatal("no pooled connection to backend a")
	}
	if err := h.gw.SetDiscovered("web", []upstream.Spec{specFor("b", other)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() bool { return open.Load() == 0 }, "connections to the removed backend to close")
}

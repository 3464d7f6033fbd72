package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// idBackend records the x-request-id values of every request it gets and
// answers with an x-request-id of its own (which the gateway must replace)
// and the status of answer (nil: 200).
type idBackend struct {
	mu     sync.Mutex
	seen   [][]string
	answer func(n int64, r *http.Request) int
	n      atomic.Int64
}

func (b *idBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	b.seen = append(b.seen, r.Header.Values("X-Request-Id"))
	b.mu.Unlock()
	status := http.StatusOK
	if b.answer != nil {
		status = b.answer(b.n.Add(1), r)
	}
	w.Header().Set("X-Request-Id", "backend-own")
	w.WriteHeader(status)
}

func (b *idBackend) ids() [][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]string(nil), b.seen...)
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// requestLogIDs are the request_id fields of the debug "request" lines.
func (l *lockedBuffer) requestLogIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["@message"] == "request" {
			id, _ := rec["request_id"].(string)
			ids = append(ids, id)
		}
	}
	return ids
}

// getWithIDs GETs path with the x-request-id field lines ids (none: no
// field).
func getWithIDs(t *testing.T, h *harness, path string, ids []string, extra http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.base+path, nil)
	for k, v := range extra {
		req.Header[k] = v
	}
	if len(ids) > 0 {
		req.Header["X-Request-Id"] = ids
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	resp.Body.Close()
	return resp
}

// generatedID fails t unless vals is one ID the gateway made up.
func generatedID(t *testing.T, what string, vals []string) string {
	t.Helper()
	if len(vals) != 1 || len(vals[0]) != 32 || strings.Trim(vals[0], "0123456789abcdef") != "" {
		t.Fatalf("%s x-request-id %q, want one generated ID", what, vals)
	}
	return vals[0]
}

// TestRequestIDPassesOrIsReplaced: a sane client ID reaches the backend and
// comes back in place of the backend's own; an insane one (too long, a
// control character, two fields, empty) or none is replaced by a generated
// ID that the backend, the client and the request log line all see.
func TestRequestIDPassesOrIsReplaced(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := &idBackend{}
		logs := &lockedBuffer{}
		cfg := Config{Upstreams: []UpstreamConfig{staticUpstream("u", "/", testbackend.NewH1(t, be))},
			Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug, JSONFormat: true})}
		h := startHarnessConfig(t, cfg, ListenerConfig{}, proto)

		sane := "client-" + proto + "-3f0c2a4e-6b1d-4c8e:9a57/0d2b_7e4f~1a93"
		resp := getWithIDs(t, h, "/a", []string{sane}, nil)
		if resp.StatusCode != 200 || resp.Header.Values("X-Request-Id")[0] != sane || len(resp.Header.Values("X-Request-Id")) != 1 {
			t.Fatalf("sane: status %d, client got x-request-id %q, want %q", resp.StatusCode, resp.Header.Values("X-Request-Id"), sane)
		}
		if got := be.ids(); len(got) != 1 || len(got[0]) != 1 || got[0][0] != sane {
			t.Fatalf("sane: backend got %q, want %q", got, sane)
		}

		insane := map[string][]string{
			"none":         nil,
			"too long":     {strings.Repeat("x", wire.MaxRequestIDBytes+1)},
			"control char": {"a\tb"},
			"two fields":   {"first", "second"},
			"comma list":   {"first,second"},
		}
		for name, ids := range insane {
			before := len(be.ids())
			resp := getWithIDs(t, h, "/a", ids, nil)
			client := generatedID(t, name+": client", resp.Header.Values("X-Request-Id"))
			got := be.ids()
			if len(got) != before+1 || generatedID(t, name+": backend", got[before]) != client {
				t.Fatalf("%s: backend got %q, client %q", name, got[before:], client)
			}
		}

		eventually(t, 5*time.Second, func() bool { return len(logs.requestLogIDs()) == 1+len(insane) }, "a request log line per request")
		logged := logs.requestLogIDs()
		if logged[0] != sane {
			t.Errorf("log request_id %q, want %q", logged[0], sane)
		}
		for i, id := range be.ids() {
			if logged[i] != id[0] {
				t.Errorf("log line %d: request_id %q, backend saw %q", i, logged[i], id[0])
			}
		}
	})
}

// TestRequestIDOnGatewayAnswers: the gateway's own answers carry the ID
// too: a 404 (no route) and a 503 (no backend), plain and as a gRPC
// Trailers-Only answer.
func TestRequestIDOnGatewayAnswers(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		h := newHarnessOver(t, proto, staticUpstream("empty", "/empty"))
		grpc := http.Header{"Content-Type": {"application/grpc"}, "Te": {"trailers"}}
		for _, tc := range []struct {
			name, path string
			extra      http.Header
			status     int
		}{
			{"404", "/nowhere", nil, http.StatusNotFound},
			{"503", "/empty/x", nil, http.StatusServiceUnavailable},
			{"grpc 404", "/nowhere", grpc, http.StatusOK},
			{"grpc 503", "/empty/x", grpc, http.StatusOK},
		} {
			resp := getWithIDs(t, h, tc.path, []string{"mine-" + tc.name[len(tc.name)-3:]}, tc.extra)
			if resp.StatusCode != tc.status || resp.Header.Get("X-Impulse-Error") == "" {
				t.Fatalf("%s: status %d (%q), want the gateway's %d", tc.name, resp.StatusCode, resp.Header.Get("X-Impulse-Error"), tc.status)
			}
			if tc.extra != nil && resp.Header.Get("Grpc-Status") == "" {
				t.Fatalf("%s: not a Trailers-Only answer: %v", tc.name, resp.Header)
			}
			if got := resp.Header.Values("X-Request-Id"); len(got) != 1 || got[0] != "mine-"+tc.name[len(tc.name)-3:] {
				t.Errorf("%s: x-request-id %q, want the client's", tc.name, got)
			}
			generatedID(t, tc.name+" (generated)", getWithIDs(t, h, tc.path, []string{"bad id"}, tc.extra).Header.Values("X-Request-Id"))
		}
	})
}

// TestRequestIDSameOnEveryTry: the retries and hedges of one request send
// the same ID, and the client gets it.
func TestRequestIDSameOnEveryTry(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		t.Run("retry", func(t *testing.T) {
			be := &idBackend{answer: func(int64, *http.Request) int { return http.StatusServiceUnavailable }}
			uc := staticUpstream("u", "/", testbackend.NewH1(t, be), testbackend.NewH1(t, be))
			uc.Retry = retryOn(2, retry.Status503)
			h := newHarnessOver(t, proto, uc)
			resp := getWithIDs(t, h, "/r", nil, nil)
			id := generatedID(t, "client", resp.Header.Values("X-Request-Id"))
			got := be.ids()
			if resp.StatusCode != http.StatusServiceUnavailable || len(got) != 2 {
				t.Fatalf("status %d after %d tries, want the 503 after 2", resp.StatusCode, len(got))
			}
			for i, vals := range got {
				if len(vals) != 1 || vals[0] != id {
					t.Errorf("try %d sent x-request-id %q, want %q", i+1, vals, id)
				}
			}
		})
		t.Run("hedge", func(t *testing.T) {
			// The first try stalls until the hedge's answer cancels it.
			be := &idBackend{answer: func(n int64, r *http.Request) int {
				if n == 1 {
					select {
					case <-r.Context().Done():
					case <-time.After(5 * time.Second):
					}
				}
				return http.StatusOK
			}}
			uc := staticUpstream("u", "/", testbackend.NewH1(t, be), testbackend.NewH1(t, be))
			uc.Hedge = retry.Hedge{Delay: 20 * time.Millisecond, Max: 1}
			h := newHarnessOver(t, proto, uc)
			resp := getWithIDs(t, h, "/h", []string{"hedged-" + proto}, nil)
			if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") != "hedged-"+proto {
				t.Fatalf("status %d, x-request-id %q", resp.StatusCode, resp.Header.Values("X-Request-Id"))
			}
			eventually(t, 5*time.Second, func() bool { return len(be.ids()) == 2 }, "two tries")
			for i, vals := range be.ids() {
				if len(vals) != 1 || vals[0] != "hedged-"+proto {
					t.Errorf("try %d sent x-request-id %q", i+1, vals)
				}
			}
		})
	})
}

// TestRequestIDOnWebSocket: a WebSocket handshake sends the ID to the
// backend and carries it in the answer that opens the tunnel (the 101 over
// HTTP/1.1, the 200 over HTTP/2 and HTTP/3).
func TestRequestIDOnWebSocket(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		e := testbackend.NewWSEcho(t)
		h := newHarnessOver(t, proto, wsUpstream(e, nil))
		id := "ws-" + proto
		var answer http.Header
		if proto == ProtocolH1 {
			resp := h1Upgrade(t, h, "/ws/echo", http.Header{"Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
				"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "X-Request-Id": {id}})
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("upgrade: status %d", resp.StatusCode)
			}
			answer = resp.Header
		} else {
			c, err := dialWS(t, h, "/ws/echo", http.Header{"X-Request-Id": {id}})
			if err != nil || c.status != http.StatusOK {
				t.Fatalf("handshake: %v", err)
			}
			defer c.close()
			answer = c.resp.Header
		}
		if got := answer.Values("X-Request-Id"); len(got) != 1 || got[0] != id {
			t.Errorf("handshake answer x-request-id %q, want %q", got, id)
		}
		if got := e.Header("X-Request-Id"); got != id {
			t.Errorf("backend got x-request-id %q, want %q", got, id)
		}
	})
}

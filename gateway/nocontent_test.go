package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// ncRow is one rule of the no-content conformance table: a backend answer,
// scripted per protocol (h1: the raw bytes; h2: the frames), optionally
// also served by a real net/http backend, and what the client must get.
type ncRow struct {
	name   string
	rule   string // where the rule comes from
	method string
	h1     string               // raw HTTP/1.1 response; "" = not for HTTP/1.1
	h2     *testbackend.H2Reply // nil = not for HTTP/2
	real   http.HandlerFunc     // a well-behaved net/http backend doing the same; nil = none
	want   ncWant
}

type ncWant struct {
	status  int
	interim []int             // 1xx statuses, in order
	fields  map[string]string // in the final HEADERS block, with this value
	absent  []string          // in no HEADERS block
	body    string
	reason  string // x-impulse-error of a gateway answer
}

func h2status(code int, kv ...string) []hpackField {
	return h2fields(append([]string{":status", fmt.Sprint(code)}, kv...)...)
}

var stray1234 = strings.Repeat("s", 1234)

// noContentRows: RFC 9110 §6.4.1, §8.6, §9.3.2, §15.2, §15.3.5, §15.4.5;
// RFC 9112 §6.3; RFC 9114 §4.1, §4.2, §4.5.
var noContentRows = []ncRow{
	{name: "GET 200 with Content-Length (baseline)", rule: "RFC 9112 §6.3 rule 6", method: "GET",
		h1:   "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(200, "content-length", "5")}, Data: "hello"},
		want: ncWant{status: 200, fields: map[string]string{"content-length": "5"}, body: "hello"}},
	{name: "103 Early Hints with Link is forwarded", rule: "RFC 9110 §15.2; RFC 8297", method: "GET",
		h1: "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		h2: &testbackend.H2Reply{Blocks: [][]hpackField{h2status(103, "link", "</s.css>; rel=preload"), h2status(200, "content-length", "2")}, Data: "ok"},
		real: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</s.css>; rel=preload")
			w.WriteHeader(103)
			w.Header().Del("Link")
			io.WriteString(w, "ok")
		},
		want: ncWant{status: 200, interim: []int{103}, body: "ok"}},
	{name: "100 without Expect is forwarded", rule: "RFC 9110 §15.2: a proxy forwards 1xx", method: "GET",
		h1:   "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(100), h2status(200, "content-length", "2")}, Data: "ok"},
		want: ncWant{status: 200, interim: []int{100}, body: "ok"}},
	{name: "1xx with Content-Length loses it", rule: "RFC 9110 §8.6: no Content-Length in a 1xx", method: "GET",
		h1:   "HTTP/1.1 103 Early Hints\r\nContent-Length: 7\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(103, "content-length", "7", "link", "</a>"), h2status(200, "content-length", "2")}, Data: "ok"},
		want: ncWant{status: 200, interim: []int{103}, fields: map[string]string{"content-length": "2"}, body: "ok"}},
	{name: "101 to a request without Upgrade is a 502", rule: "RFC 9110 §15.2.2; RFC 9114 §4.5: no 101 in HTTP/3", method: "GET",
		h1:   "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(101), h2status(200, "content-length", "2")}, Data: "ok"},
		want: ncWant{status: 502, reason: "backend_invalid_response", body: "Bad Gateway: backend_invalid_response\n"}},
	{name: "101 without Upgrade fields is a 502", rule: "RFC 9110 §15.2.2", method: "GET",
		h1:   "HTTP/1.1 101 Switching Protocols\r\n\r\n",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(101)}}, // the only HEADERS, so with END_STREAM
		want: ncWant{status: 502, reason: "backend_invalid_response", body: "Bad Gateway: backend_invalid_response\n"}},
	{name: "six 1xx responses are a 502", rule: "bounded like net/http and quic-go clients (5)", method: "GET",
		h1: strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", 6) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		h2: &testbackend.H2Reply{Blocks: [][]hpackField{h2status(103), h2status(103), h2status(103), h2status(103), h2status(103), h2status(103),
			h2status(200, "content-length", "2")}, Data: "ok"},
		want: ncWant{status: 502, interim: []int{103, 103, 103, 103, 103}, reason: "backend_invalid_response", body: "Bad Gateway: backend_invalid_response\n"}},
	{name: "HEAD keeps Content-Length, no body", rule: "RFC 9110 §9.3.2, §8.6", method: "HEAD",
		h1: "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n",
		h2: &testbackend.H2Reply{Blocks: [][]hpackField{h2status(200, "content-length", "1234")}},
		real: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1234")
		},
		want: ncWant{status: 200, fields: map[string]string{"content-length": "1234"}}},
	{name: "HEAD with stray body bytes: dropped", rule: "RFC 9112 §6.3 rule 1", method: "HEAD",
		h1:   "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n" + stray1234,
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(200, "content-length", "1234")}, Data: stray1234},
		want: ncWant{status: 200, fields: map[string]string{"content-length": "1234"}}},
	{name: "HEAD of a chunked resource: no Content-Length invented", rule: "RFC 9110 §9.3.2, §8.6", method: "HEAD",
		h1: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
		h2: &testbackend.H2Reply{Blocks: [][]hpackField{h2status(200)}},
		real: func(w http.ResponseWriter, r *http.Request) {
			w.(http.Flusher).Flush() // headers out before any length is known: chunked
		},
		want: ncWant{status: 200, absent: []string{"content-length", "transfer-encoding"}}},
	{name: "HEAD 200 with Transfer-Encoding over HTTP/2 (malformed there)", rule: "RFC 9113 §8.2.2; RFC 9114 §4.2", method: "HEAD",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(200, "transfer-encoding", "chunked")}},
		want: ncWant{status: 200, absent: []string{"content-length", "transfer-encoding"}}},
	{name: "HEAD without any length", rule: "RFC 9112 §6.3 rule 1", method: "HEAD",
		h1:   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n",
		want: ncWant{status: 200, absent: []string{"content-length"}}},
	{name: "204", rule: "RFC 9110 §15.3.5", method: "GET",
		h1: "HTTP/1.1 204 No Content\r\n\r\n",
		h2: &testbackend.H2Reply{Blocks: [][]hpackField{h2status(204)}},
		real: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(204)
		},
		want: ncWant{status: 204, absent: []string{"content-length"}}},
	{name: "204 with Content-Length: 0 loses it", rule: "RFC 9110 §8.6", method: "GET",
		h1:   "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(204, "content-length", "0")}},
		want: ncWant{status: 204, absent: []string{"content-length"}}},
	{name: "204 with Content-Length and a body: both dropped", rule: "RFC 9110 §8.6, §15.3.5; RFC 9112 §6.3", method: "GET",
		h1:   "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(204, "content-length", "5")}, Data: "hello"},
		want: ncWant{status: 204, absent: []string{"content-length"}}},
	{name: "204 with Transfer-Encoding: chunked", rule: "RFC 9112 §6.1: none in a 204", method: "GET",
		h1:   "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
		want: ncWant{status: 204, absent: []string{"content-length", "transfer-encoding"}}},
	{name: "204 with trailers: dropped", rule: "RFC 9110 §15.3.5: no content or trailers", method: "GET",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(204), h2fields("x-trailer", "1")}},
		want: ncWant{status: 204, absent: []string{"x-trailer", "content-length"}}},
	{name: "103 then 204", rule: "RFC 9110 §15.2, §15.3.5", method: "GET",
		h1:   "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(103, "link", "</a>"), h2status(204)}},
		want: ncWant{status: 204, interim: []int{103}, absent: []string{"content-length"}}},
	{name: "304 keeps Content-Length and ETag", rule: "RFC 9110 §15.4.5, §8.6", method: "GET",
		h1:   "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 1234\r\n\r\n",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(304, "etag", `"v1"`, "content-length", "1234")}},
		want: ncWant{status: 304, fields: map[string]string{"etag": `"v1"`, "content-length": "1234"}}},
	{name: "304 with ETag", rule: "RFC 9110 §15.4.5", method: "GET",
		h1: "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n",
		h2: &testbackend.H2Reply{Blocks: [][]hpackField{h2status(304, "etag", `"v1"`)}},
		real: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", `"v1"`)
			w.WriteHeader(304)
		},
		want: ncWant{status: 304, fields: map[string]string{"etag": `"v1"`}, absent: []string{"content-length"}}},
	{name: "304 with a body: dropped", rule: "RFC 9110 §15.4.5; RFC 9112 §6.3 rule 1", method: "GET",
		h1:   "HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\nstray",
		h2:   &testbackend.H2Reply{Blocks: [][]hpackField{h2status(304, "etag", `"v1"`)}, Data: "stray"},
		want: ncWant{status: 304, fields: map[string]string{"etag": `"v1"`}, absent: []string{"content-length"}}},
	{name: "chunked body arrives de-chunked", rule: "RFC 9112 §7.1; RFC 9114 §4.2", method: "GET",
		h1:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		want: ncWant{status: 200, absent: []string{"transfer-encoding"}, body: "hello"}},
	{name: "Transfer-Encoding and Content-Length: the length is dropped", rule: "RFC 9112 §6.3 rule 3", method: "GET",
		h1:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		want: ncWant{status: 200, absent: []string{"transfer-encoding"}, body: "hello"}},
	{name: "no length: the body ends with the connection", rule: "RFC 9112 §6.3 rule 8", method: "GET",
		h1:   "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close" + testbackend.CloseAfter,
		want: ncWant{status: 200, absent: []string{"transfer-encoding"}, body: "until close"}},
	{name: "a final Transfer-Encoding other than chunked is a 502", rule: "RFC 9112 §6.3 rule 4 (net/http refuses it)", method: "GET",
		h1:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxxxx" + testbackend.CloseAfter,
		want: ncWant{status: 502, reason: "backend_reset", body: "Bad Gateway: backend_reset\n"}},
	{name: "invalid Content-Length is a 502", rule: "RFC 9112 §6.3 rule 5", method: "GET",
		h1:   "HTTP/1.1 200 OK\r\nContent-Length: abc\r\n\r\nhello",
		want: ncWant{status: 502, reason: "backend_reset", body: "Bad Gateway: backend_reset\n"}},
	{name: "differing Content-Lengths are a 502", rule: "RFC 9112 §6.3 rule 5", method: "GET",
		h1:   "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
		want: ncWant{status: 502, reason: "backend_reset", body: "Bad Gateway: backend_reset\n"}},
	{name: "connection-specific response fields are removed", rule: "RFC 9114 §4.2; RFC 9110 §7.6.1", method: "GET",
		h1: "HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\nok",
		want: ncWant{status: 200, absent: []string{"connection", "keep-alive", "proxy-connection", "upgrade", "transfer-encoding"},
			body: "ok"}},
}

// TestNoContentConformance runs noContentRows against every backend
// protocol (scripted doubles, and real net/http backends where a row has
// one) with quic-go's client and with nghttp3 (gtlsclient), which resets the
// stream on a response RFC 9110 or RFC 9114 forbids. After each row a GET
// on the same backend must be answered correctly.
func TestNoContentConformance(t *testing.T) {
	scripts := map[string]string{"/ok": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}
	h2scripts := map[string]*testbackend.H2Reply{"/ok": {Blocks: [][]hpackField{h2status(200, "content-length", "2")}, Data: "ok"}}
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	for i, row := range noContentRows {
		p := fmt.Sprintf("/row/%d", i)
		scripts[p] = row.h1
		h2scripts[p] = row.h2
		if row.real != nil {
			mux.HandleFunc(p, row.real)
		}
	}
	var mu sync.Mutex
	h1 := testbackend.ScriptedH1(t, func(r *http.Request) string { mu.Lock(); defer mu.Unlock(); return scripts[r.URL.Path] })
	backends := map[string]UpstreamConfig{
		"h1 scripted": staticUpstream("u", "/", h1),
		"h2 framer": framerH2(t, "u", "/", func(method, path string) testbackend.H2Reply {
			mu.Lock()
			defer mu.Unlock()
			return *h2scripts[path]
		}),
		"h1 net/http": staticUpstream("u", "/", testbackend.NewH1(t, mux)),
		"h2 net/http": staticUpstream("u", "/", testbackend.NewH2(t, mux)),
	}
	for _, name := range []string{"h1 scripted", "h2 framer", "h1 net/http", "h2 net/http"} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, backends[name])
			for i, row := range noContentRows {
				switch {
				case name == "h1 scripted" && row.h1 == "",
					name == "h2 framer" && row.h2 == nil,
					strings.HasSuffix(name, "net/http") && row.real == nil:
					continue
				}
				t.Run(row.name, func(t *testing.T) {
					p := fmt.Sprintf("/row/%d", i)
					checkQuicGo(t, h, row, p)
					checkStrict(t, h, row, p)
					resp := h.get("/ok")
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || string(b) != "ok" || err != nil {
						t.Errorf("the next GET on the backend: %d %q %v", resp.StatusCode, b, err)
					}
				})
			}
		})
	}
}

func checkQuicGo(t *testing.T, h *harness, row ncRow, path string) {
	t.Helper()
	var interim []int
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
		interim = append(interim, code)
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), row.method, h.base+path, nil)
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("quic-go client: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Errorf("quic-go client: body: %v", err)
	}
	if resp.StatusCode != row.want.status || string(body) != row.want.body || !slices.Equal(interim, row.want.interim) {
		t.Errorf("quic-go client: got %d %q interim %v, want %d %q interim %v", resp.StatusCode, body, interim,
			row.want.status, row.want.body, row.want.interim)
	}
	if got := resp.Header.Get("X-Impulse-Error"); got != row.want.reason {
		t.Errorf("x-impulse-error %q, want %q", got, row.want.reason)
	}
}

func checkStrict(t *testing.T, h *harness, row ncRow, path string) {
	t.Helper()
	res := strictClient(t, h, row.method, path)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("nghttp3: "+format+"\n%s", append(args, res.output)...)
	}
	if res.closeCode != 0x100 {
		fail("stream closed with code %#x, want H3_NO_ERROR (0x100): nghttp3 rejected the response", res.closeCode)
		return
	}
	if len(res.blocks) == 0 {
		fail("no response")
		return
	}
	final := res.blocks[len(res.blocks)-1]
	var interim []int
	for _, b := range res.blocks[:len(res.blocks)-1] {
		var c int
		fmt.Sscan(b[":status"][0], &c)
		interim = append(interim, c)
	}
	if got := strings.Join(final[":status"], ","); got != fmt.Sprint(row.want.status) || !slices.Equal(interim, row.want.interim) {
		fail("status %s interim %v, want %d interim %v", got, interim, row.want.status, row.want.interim)
	}
	for k, v := range row.want.fields {
		if got := strings.Join(final[k], ","); got != v {
			fail("%s = %q, want %q", k, got, v)
		}
	}
	for _, k := range row.want.absent {
		for _, b := range res.blocks {
			if v, ok := b[k]; ok {
				fail("%s: %q present", k, v)
			}
		}
	}
	if res.bodyBytes != len(row.want.body) {
		fail("%d body bytes, want %d", res.bodyBytes, len(row.want.body))
	}
}

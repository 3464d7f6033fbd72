package tunnel

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/gobwas/ws"
)

func TestTunnelOf(t *testing.T) {
	for name, tc := range map[string]struct {
		r     *http.Request
		want  Request
		isTun bool
	}{
		"h1 websocket": {&http.Request{ProtoMajor: 1, ProtoMinor: 1, Method: "GET", Header: http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"WebSocket"}}},
			Request{Token: "websocket", Upgrade: "WebSocket"}, true},
		"h1 upgrade list": {&http.Request{ProtoMajor: 1, ProtoMinor: 1, Method: "GET", Header: http.Header{"Connection": {"upgrade"}, "Upgrade": {"x-test/1, websocket"}}},
			Request{Token: "x-test/1", Upgrade: "x-test/1, websocket"}, true},
		"h1 upgrade without connection option": {&http.Request{ProtoMajor: 1, ProtoMinor: 1, Method: "GET", Header: http.Header{"Upgrade": {"websocket"}}}, Request{}, false},
		"h1.0 upgrade": {&http.Request{ProtoMajor: 1, Method: "GET", Header: http.Header{"Connection": {"upgrade"}, "Upgrade": {"websocket"}}},
			Request{}, false}, // RFC 9110 §7.8: ignored
		"h1 plain": {&http.Request{ProtoMajor: 1, ProtoMinor: 1, Method: "GET", Header: http.Header{}}, Request{}, false},
		"h2 extended connect": {&http.Request{ProtoMajor: 2, Method: "CONNECT", Header: http.Header{":protocol": {"websocket"}}},
			Request{Token: "websocket", Extended: true}, true},
		"h2 plain connect": {&http.Request{ProtoMajor: 2, Method: "CONNECT", Header: http.Header{}}, Request{}, false},
		"h2 get with upgrade fields": {&http.Request{ProtoMajor: 2, Method: "GET", Header: http.Header{"Connection": {"upgrade"}, "Upgrade": {"websocket"}}},
			Request{}, false},
		"h3 extended connect": {&http.Request{ProtoMajor: 3, Proto: "websocket", Method: "CONNECT", Header: http.Header{}},
			Request{Token: "websocket", Extended: true}, true},
		"h3 plain connect": {&http.Request{ProtoMajor: 3, Proto: "HTTP/3.0", Method: "CONNECT", Header: http.Header{}}, Request{}, false},
	} {
		got, ok := Of(tc.r)
		if ok != tc.isTun || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v %v", name, got, ok, tc.want, tc.isTun)
		}
	}
}

func TestUpgradeAllowed(t *testing.T) {
	for _, tc := range []struct {
		allowed []string
		token   string
		want    bool
	}{
		{nil, "websocket", true},
		{nil, "h2c", false},
		{[]string{}, "websocket", false},
		{[]string{"WebSocket", "x-test/1"}, "x-test/1", true},
		{[]string{"websocket"}, "WEBSOCKET", true},
	} {
		if got := Allowed(tc.allowed, tc.token); got != tc.want {
			t.Errorf("Allowed(%q, %q) = %v", tc.allowed, tc.token, got)
		}
	}
}

func TestValidWebSocketRequest(t *testing.T) {
	key := "dGhlIHNhbXBsZSBub25jZQ==" // RFC 6455 §1.3
	for name, tc := range map[string]struct {
		method   string
		h        http.Header
		extended bool
		want     bool
	}{
		"rfc example":        {"GET", http.Header{"Sec-Websocket-Key": {key}, "Sec-Websocket-Version": {"13"}}, false, true},
		"no key":             {"GET", http.Header{"Sec-Websocket-Version": {"13"}}, false, false},
		"short key":          {"GET", http.Header{"Sec-Websocket-Key": {"c2hvcnQ="}, "Sec-Websocket-Version": {"13"}}, false, false},
		"two keys":           {"GET", http.Header{"Sec-Websocket-Key": {key, key}, "Sec-Websocket-Version": {"13"}}, false, false},
		"version 8":          {"GET", http.Header{"Sec-Websocket-Key": {key}, "Sec-Websocket-Version": {"8"}}, false, false},
		"post":               {"POST", http.Header{"Sec-Websocket-Key": {key}, "Sec-Websocket-Version": {"13"}}, false, false},
		"extended, no key":   {"CONNECT", http.Header{"Sec-Websocket-Version": {"13"}}, true, true},
		"extended, no vers.": {"CONNECT", http.Header{}, true, false},
	} {
		if got := ValidWebSocket(&http.Request{Method: tc.method, Header: tc.h}, tc.extended); got != tc.want {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	if got := WebSocketAccept(key); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" { // RFC 6455 §1.3
		t.Errorf("accept %q", got)
	}
}

// TestWSFrames: the boundary tracker over frames split at every byte,
// masked and not, with 7-, 16- and 64-bit lengths.
func TestWSFrames(t *testing.T) {
	var stream bytes.Buffer
	var ends []int
	for _, f := range []ws.Frame{
		ws.NewTextFrame([]byte("hi")),
		ws.MaskFrame(ws.NewBinaryFrame(bytes.Repeat([]byte{1}, 300))),
		ws.NewBinaryFrame(bytes.Repeat([]byte{2}, 70000)),
		ws.NewPingFrame(nil),
		ws.NewCloseFrame(ws.NewCloseFrameBody(1000, "")),
	} {
		if err := ws.WriteFrame(&stream, f); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, stream.Len())
	}
	b := stream.Bytes()
	var f wsFrames
	next := 0
	for i := range b {
		if f.closed && i < ends[3] {
			t.Fatalf("close seen before its frame, at %d", i)
		}
		f.feed(b[i : i+1])
		at := next < len(ends) && i+1 == ends[next]
		if at {
			next++
		}
		if f.atBoundary() != at {
			t.Fatalf("after byte %d: atBoundary %v, want %v", i, f.atBoundary(), at)
		}
	}
	if !f.closed {
		t.Fatal("the close frame was not seen")
	}
	var g wsFrames
	g.feed(b) // all at once
	if !g.atBoundary() || !g.closed {
		t.Fatal("one feed of the whole stream")
	}
	var bad wsFrames
	bad.feed([]byte{0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0})
	if bad.atBoundary() {
		t.Fatal("a 64-bit length with the top bit set is not understood framing")
	}
	if c := wsCloseFrame(wsCloseGoingAway, "bye", true); c[1]&0x80 == 0 || len(c) != 2+4+2+3 {
		t.Fatalf("masked close frame %x", c)
	}
}

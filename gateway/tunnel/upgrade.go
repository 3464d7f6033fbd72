package tunnel

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// WebSocket is the upgrade token of WebSocket (RFC 6455 §4.1), the one a
// route allows by default.
const WebSocket = "websocket"

// DefaultUpgrades is what a route allows when its Upgrades is nil.
var DefaultUpgrades = []string{WebSocket}

// Request is the tunnel a request asks for.
type Request struct {
	// Token is the protocol, lower-cased: the first of an HTTP/1.1 Upgrade
	// field, or the :protocol of an extended CONNECT ("websocket").
	Token string
	// Upgrade is the HTTP/1.1 Upgrade value as sent (forwarded unchanged);
	// empty for an extended CONNECT, which sends token.
	Upgrade string
	// Extended is an extended CONNECT: RFC 8441 over HTTP/2, RFC 9220 over
	// HTTP/3. The client gets 200, not 101.
	Extended bool
}

// Of reports the tunnel r asks for, if any:
//   - HTTP/1.1: an Upgrade field with "upgrade" among the Connection options
//     (RFC 9110 §7.8; without it, Upgrade is a stray hop-by-hop field and
//     the request an ordinary one);
//   - HTTP/2: CONNECT with :protocol, which net/http puts in
//     r.Header[":protocol"] (RFC 8441 §4);
//   - HTTP/3: CONNECT with :protocol, which quic-go puts in r.Proto (RFC 9220 §3).
//
// A plain CONNECT (no protocol) is not a tunnel this gateway opens.
func Of(r *http.Request) (Request, bool) {
	switch r.ProtoMajor {
	case 1:
		up := r.Header["Upgrade"]
		// HTTP/1.0 has no Upgrade: a server ignores it there (RFC 9110 §7.8).
		if len(up) == 0 || r.ProtoMinor == 0 || !httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") {
			return Request{}, false
		}
		token, _, _ := strings.Cut(up[0], ",")
		token = strings.ToLower(strings.TrimSpace(token))
		if token == "" {
			return Request{}, false
		}
		return Request{Token: token, Upgrade: strings.Join(up, ", ")}, true
	case 2:
		if p := r.Header[":protocol"]; r.Method == http.MethodConnect && len(p) == 1 && p[0] != "" {
			return Request{Token: strings.ToLower(p[0]), Extended: true}, true
		}
	case 3:
		if r.Method == http.MethodConnect && r.Proto != "" && !strings.HasPrefix(r.Proto, "HTTP/") {
			return Request{Token: strings.ToLower(r.Proto), Extended: true}, true
		}
	}
	return Request{}, false
}

// Allowed reports whether a route allowing allowed (nil:
// DefaultUpgrades) lets token through. Tokens compare case-insensitively.
func Allowed(allowed []string, token string) bool {
	if allowed == nil {
		allowed = DefaultUpgrades
	}
	return slices.ContainsFunc(allowed, func(a string) bool { return strings.EqualFold(a, token) })
}

// WebSocketVersion is the only version of RFC 6455 (§4.1, §11.6).
const WebSocketVersion = "13"

// ValidWebSocket reports whether r is a well-formed opening handshake:
// over HTTP/1.1 a GET with a Sec-WebSocket-Key of 16 base64-encoded bytes
// (RFC 6455 §4.2.1); over extended CONNECT no key (RFC 8441 §5); version
// 13 on both. A failed one gets 400 with "Sec-WebSocket-Version: 13"
// (RFC 6455 §4.4).
func ValidWebSocket(r *http.Request, extended bool) bool {
	if v := r.Header["Sec-Websocket-Version"]; len(v) != 1 || strings.TrimSpace(v[0]) != WebSocketVersion {
		return false
	}
	if extended {
		return true
	}
	k := r.Header["Sec-Websocket-Key"]
	if r.Method != http.MethodGet || len(k) != 1 {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(k[0]))
	return err == nil && len(raw) == 16
}

// newWebSocketKey is a fresh Sec-WebSocket-Key for the HTTP/1.1 handshake
// the gateway makes for an extended CONNECT (RFC 6455 §4.1: a random
// 16-byte nonce, base64-encoded).
func newWebSocketKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.StdEncoding.EncodeToString(b[:])
}

// WebSocketAccept is the Sec-WebSocket-Accept a server answers key with
// (RFC 6455 §4.2.2 step 5.4).
func WebSocketAccept(key string) string {
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(h[:])
}

// Switched reports whether a 101 answer switched to the protocol tr asked
// for: its Upgrade field names token (RFC 9110 §15.2.2), and, for a
// WebSocket the gateway keyed itself (extended), it carries the accept of
// key (RFC 6455 §4.1, the client's check).
func Switched(resp *http.Response, tr Request, key string) bool {
	up, _, _ := strings.Cut(resp.Header.Get("Upgrade"), ",")
	if !strings.EqualFold(strings.TrimSpace(up), tr.Token) {
		return false
	}
	return key == "" || resp.Header.Get("Sec-Websocket-Accept") == WebSocketAccept(key)
}

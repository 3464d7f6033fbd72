package gateway

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"

	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/tunnel"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// connectionSpecific are the fields no backend request may carry from a
// client (RFC 9110 §7.6.1, RFC 9113 §8.2.2, RFC 9114 §4.2), canonical.
var connectionSpecific = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Te", "Trailer",
	"Proxy-Authorization", "Proxy-Authenticate", "Http2-Settings",
}

// gatewayFields are set by the gateway itself after the client's fields are
// filtered: a client naming them in Connection cannot strike them.
var gatewayFields = []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Client-Cert", "User-Agent", wire.RequestIDField, "Early-Data"}

// FuzzOutgoingHeaders builds a client request from fuzzed header lines
// ("name: value", one per "\n"; any byte goes), keeps it only if an
// ingress would (the field syntax all three check: httpguts, as net/http,
// x/net/http2 and quic-go do; HTTP/1.1, the most lenient, is modelled),
// and converts it into a backend request with outgoing, or
// tunnelOutgoing when it asks for an upgrade, as serve does. Whatever the
// client sent:
//   - no name or value the backend's parser would refuse, and no CR, LF or
//     NUL, in the map or on the HTTP/1.1 wire;
//   - no connection-specific field: Connection, Keep-Alive,
//     Proxy-Connection, Transfer-Encoding, Trailer, HTTP2-Settings and the
//     proxy authentication fields never; Upgrade and "Connection: Upgrade" only
//     on a tunnel's handshake, with the client's protocol; TE only
//     "trailers" and only to an HTTP/2 backend;
//   - no field the client named in Connection, but the gateway's own
//     (X-Forwarded-*, x-request-id, Early-Data) always present.
func FuzzOutgoingHeaders(f *testing.F) {
	for _, s := range []string{
		"Accept: */*\nCookie: a=1",
		"Connection: keep-alive, X-Secret\nX-Secret: 1\nKeep-Alive: timeout=5\nProxy-Connection: close",
		"TE: trailers, gzip\nTrailer: X-Sum\nTransfer-Encoding: chunked\nUpgrade: h2c\nConnection: Upgrade, HTTP2-Settings\nHTTP2-Settings: AAA",
		"Connection: Upgrade\nUpgrade: websocket\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\nSec-WebSocket-Version: 13",
		"Connection: x-request-id, x-forwarded-for, early-data, user-agent\nX-Request-Id: abc\nX-Forwarded-For: 10.0.0.1",
		"X-Forwarded-Client-Cert: forged\nX_Forwarded_Client_Cert: forged\nProxy-Authorization: Basic eA==",
		"X-A: a\rb\nX-B: \x00\nX-C: ok\tok\nBad Name: x\nX-D: \u00e9",
		"connection: close\nte: trailers\nupgrade: websocket\nconnection: upgrade",
	} {
		for scheme := byte(0); scheme < 3; scheme++ {
			f.Add(s, scheme)
		}
	}
	f.Fuzz(func(t *testing.T, lines string, scheme byte) {
		h := http.Header{}
		for _, line := range strings.Split(lines, "\n") {
			name, value, ok := strings.Cut(line, ":")
			value = textproto.TrimString(value)
			if !ok || !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
				return // every ingress refuses the request
			}
			h.Add(name, value)
		}
		host := "web.example.com"
		if v := h["Host"]; len(v) > 0 {
			host = v[0] // net/http moves Host out of the header map
		}
		delete(h, "Host")
		delete(h, "Transfer-Encoding") // into r.TransferEncoding
		client := h.Clone()
		r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/p"}, RequestURI: "/p", Header: h, Host: host,
			RemoteAddr: "192.0.2.1:5555", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		r = r.WithContext(context.Background())
		id := wire.RequestID(r)
		b := &upstream.Backend{Spec: upstream.Spec{Scheme: []string{transport.SchemeHTTP, transport.SchemeHTTPS, transport.SchemeH2C}[scheme%3]}}
		tr, tunneled := tunnel.Of(r)
		var out *http.Request
		if tunneled {
			out, _ = tunnel.Outgoing(r.Context(), r, b, tr, nil)
		} else {
			out, _ = wire.Outgoing(r.Context(), r, b, wire.Body{}, false, nil)
		}
		for k, vs := range out.Header {
			if !httpguts.ValidHeaderFieldName(k) {
				t.Fatalf("invalid field name %q reaches the backend", k)
			}
			for _, v := range vs {
				if !httpguts.ValidHeaderFieldValue(v) || strings.ContainsAny(v, "\r\n\x00") {
					t.Fatalf("field %s: invalid value %q reaches the backend", k, v)
				}
			}
		}
		for _, k := range connectionSpecific {
			v, present := out.Header[k]
			switch {
			case !present:
			case tunneled && k == "Connection" && slices.Equal(v, []string{"Upgrade"}):
			case tunneled && k == "Upgrade" && slices.Equal(v, []string{tr.Upgrade}):
			case k == "Te" && transport.IsHTTP2(b.Scheme) && slices.Equal(v, []string{"trailers"}):
			default:
				t.Fatalf("%s: %q reaches a %s backend (tunnel %v)", k, v, b.Scheme, tunneled)
			}
		}
		if tunneled && (len(out.Header["Upgrade"]) == 0 || len(out.Header["Connection"]) == 0) {
			t.Fatalf("a tunnel's handshake without Upgrade/Connection: %v", out.Header)
		}
		for _, v := range client["Connection"] {
			for _, name := range strings.Split(v, ",") {
				name = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(name))
				if name == "" || slices.Contains(gatewayFields, name) || tunneled && (name == "Upgrade" || name == "Connection") {
					continue
				}
				// "Connection: te" is how an HTTP/1.1 client must send TE
				// (RFC 9110 §10.1.4); "TE: trailers" to an HTTP/2 backend is
				// the gateway's own, as checked above.
				if name == "Te" && transport.IsHTTP2(b.Scheme) && slices.Equal(out.Header["Te"], []string{"trailers"}) {
					continue
				}
				if _, ok := out.Header[name]; ok {
					t.Fatalf("%s, named in the client's Connection, reaches the backend", name)
				}
			}
		}
		if got := out.Header[wire.RequestIDField]; !slices.Equal(got, id) {
			t.Fatalf("x-request-id %q reaches the backend, want the gateway's %q", got, id)
		}
		for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host"} {
			if len(out.Header[k]) != 1 {
				t.Fatalf("%s: %q, want the gateway's one value", k, out.Header[k])
			}
		}
		if _, ok := out.Header[wire.XFCCField]; ok {
			t.Fatalf("the client's %s reaches the backend", wire.XFCCField)
		}
		if b.Scheme != transport.SchemeHTTP {
			return
		}
		// The HTTP/1.1 wire: one field per line, each a valid name and value.
		out.URL.Host = "backend.test:80"
		var wire bytes.Buffer
		if err := out.Write(&wire); err != nil {
			t.Fatalf("the backend request does not serialize: %v", err)
		}
		br := bufio.NewReader(&wire)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		for {
			line, err := br.ReadString('\n')
			if err != nil || !strings.HasSuffix(line, "\r\n") {
				t.Fatalf("header line %q not ended by CRLF (%v)", line, err)
			}
			line = strings.TrimSuffix(line, "\r\n")
			if line == "" {
				break
			}
			name, value, ok := strings.Cut(line, ":")
			if !ok || !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) || strings.ContainsAny(line, "\r\n\x00") {
				t.Fatalf("malformed field line %q on the wire", line)
			}
		}
	})
}

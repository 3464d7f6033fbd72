// Package wire holds what the request pipeline and the tunnels both need of
// HTTP's wire rules: the backend request of one try (Outgoing), the copy of
// a backend's response to the client (CopyResponse), the hop-by-hop fields
// a proxy drops (RFC 9110 §7.6.1), the responses that have no content, the
// request ID and the forwarded client certificate.
package wire

import (
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/impulse-agent/impulse-agent/gateway/transport"
)

// hopHeaders are connection-specific fields that a proxy must not forward
// (RFC 9110 §7.6.1); HTTP/3 forbids them outright (RFC 9114 §4.2).
// HTTP2-Settings goes with an h2c upgrade (RFC 7540 §3.2.1), whether or not
// Connection names it (FuzzIngress found it forwarded alone).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Http2-Settings",
}

// RemoveHopHeaders deletes hop-by-hop fields, including those listed in
// Connection, from h in place. Early-Data stays even when listed: it is
// never connection-specific and an intermediary must not remove it
// (RFC 8470 §5.1), so the gateway's own mark cannot be struck that way.
// Nor can x-request-id, the gateway's own on every try (requestid.go): a
// client's "Connection: x-request-id" kept it from the backend
// (FuzzOutgoingHeaders).
func RemoveHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			if f = textproto.TrimString(f); f != "" && !strings.EqualFold(f, "Early-Data") && !strings.EqualFold(f, RequestIDField) {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// HasNoContent reports whether the response to method with status has no
// content whatever its header fields say: a response to HEAD, a 1xx, 204 or
// 304 (RFC 9110 §6.4.1, §9.3.2, §15.3.5, §15.4.5; RFC 9112 §6.3 rule 1).
// The gateway sends such a response as a HEADERS frame and the end of the
// stream, never a DATA frame (RFC 9114 §4.1), and discards whatever a
// misbehaving backend sent as a body.
func HasNoContent(method string, status int) bool {
	return method == http.MethodHead || status < 200 || status == http.StatusNoContent || status == http.StatusNotModified
}

// FixNoContentFraming adjusts the response header h (the backend's fields,
// hop-by-hop ones already removed) of a response without content:
//   - 204: no Content-Length (RFC 9110 §8.6: a server must not send one;
//     strict HTTP/3 clients reset the stream on it);
//   - HEAD and 304: the backend's Content-Length is kept (it is the length a
//     GET would have had, RFC 9110 §8.6); without one, none is invented: a
//     present-but-nil value stops the HTTP/3 writer from adding
//     "content-length: 0".
func FixNoContentFraming(h http.Header, status int) {
	if status == http.StatusNoContent {
		delete(h, "Content-Length")
		return
	}
	if _, ok := h["Content-Length"]; !ok {
		h["Content-Length"] = nil
	}
}

// teTrailers is the only TE value HTTP/2 and HTTP/3 allow (RFC 9113 §8.2.2,
// RFC 9114 §4.2).
var teTrailers = []string{"trailers"}

// keepTETrailers puts "te: trailers" back into the outgoing header h of an
// HTTP/2 backend (https or h2c) when the client sent it: gRPC servers require it, and
// removeHopHeaders deletes every TE. HTTP/1.1 backends never get it (there TE
// is hop-by-hop and would have to be listed in Connection, RFC 9110 §10.1.4).
func keepTETrailers(h, client http.Header, scheme string) {
	if transport.IsHTTP2(scheme) && httpguts.HeaderValuesContainsToken(client["Te"], "trailers") {
		h["Te"] = teTrailers
	}
}

// IsGRPC reports whether h, a request's or a response's header, is a
// gRPC message's: content-type application/grpc or a subtype (gRPC over
// HTTP/2, "Requests").
func IsGRPC(h http.Header) bool {
	ct := h["Content-Type"]
	return len(ct) > 0 && strings.HasPrefix(ct[0], "application/grpc")
}

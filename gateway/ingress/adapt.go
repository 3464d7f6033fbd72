package ingress

import (
	"net/http"
	"slices"
	"strings"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
)

// adaptTCP is the request part of the TCP adapter: what only an HTTP/1.1
// or HTTP/2 request can carry is settled here, so the pipeline sees what
// HTTP/3 would give it. It returns the answer r gets instead of being
// forwarded (Status 0: none), which the pipeline gives with the Outcome of
// any request.
//
//   - HTTP/2: differing content-length fields make the request malformed
//     (RFC 9110 §8.6, RFC 9113 §8.1.1; x/net/http2 uses the first):
//     400 client_body_malformed, nothing forwarded. HTTP/1.1 and HTTP/3
//     refuse them in Go's server and quic-go.
//
//   - The absolute form of the request-target ("GET https://host/p",
//     RFC 9112 §3.2.2), which a server must accept, becomes the origin form,
//     and its authority replaces Host (RFC 9112 §3.2.2: a server ignores the
//     Host field then). Only http and https are accepted: anything else is
//     not a request for this origin (400 invalid_path).
//
//   - A chunked request closes the connection after the response. Go's
//     server drops a Content-Length sent next to Transfer-Encoding without
//     telling, and such a request must close the connection (RFC 9112 §6.1,
//     §11.2): a front proxy that framed it by Content-Length has left the
//     rest on this connection as a smuggled request. Closing after every
//     chunked request is the only way to close after those.
func adaptTCP(w http.ResponseWriter, r *http.Request) answer.Answer {
	if r.ProtoMajor == 2 {
		if cl := r.Header["Content-Length"]; len(cl) > 1 && slices.ContainsFunc(cl[1:], func(v string) bool { return v != cl[0] }) {
			return answer.ClientBodyMalformed
		}
		return answer.Answer{}
	}
	if r.ProtoMajor != 1 {
		return answer.Answer{}
	}
	if r.Method != http.MethodConnect && (r.URL.IsAbs() || r.URL.Host != "") { // CONNECT's authority form: 501 in serve
		scheme := strings.ToLower(r.URL.Scheme)
		rest, ok := strings.CutPrefix(r.RequestURI[len(scheme):], "://")
		if (scheme != "http" && scheme != "https") || !ok {
			return answer.InvalidPath
		}
		if r.URL.Host == "" || r.URL.User != nil {
			// "https:///p" names no host; userinfo in the authority is
			// refused as quic-go refuses it in :authority (RFC 9110
			// §4.2.4: a sender must not generate it).
			return answer.InvalidAuthority
		}
		target := "/"
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			target = rest[i:]
			if target[0] == '?' {
				target = "/" + target
			}
		}
		r.RequestURI, r.Host = target, r.URL.Host
		r.URL.Scheme, r.URL.Host = "", ""
	}
	if slices.Contains(r.TransferEncoding, "chunked") {
		w.Header()["Connection"] = []string{"close"}
	}
	return answer.Answer{}
}

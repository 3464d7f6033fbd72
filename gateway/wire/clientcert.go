package wire

import (
	"context"
	"net/http"
	"strings"
)

// XFCCField carries a verified client certificate to backends, in Envoy's
// format (certs.Identity.XFCC).
const XFCCField = "X-Forwarded-Client-Cert"

type xfccKey struct{}

// DeleteSpellings removes the field name (canonical) from h with every
// spelling a backend may take for it: name itself, and the keys of h
// equal to it but for "_" in place of "-" and letter case ("X_User",
// "x_user", "X-user"...), which CGI, WSGI and PHP map to the same
// variable (HTTP_X_USER) as "X-User". A gateway that sets or strips a
// field for backends to trust must strip them all, or a client forges it
// with the other spelling.
func DeleteSpellings(h http.Header, name string) {
	delete(h, name)
	for k := range h {
		if len(k) == len(name) && strings.EqualFold(strings.ReplaceAll(k, "_", "-"), strings.ReplaceAll(name, "_", "-")) {
			delete(h, k)
		}
	}
}

// WithClientCert returns ctx carrying xfcc, the X-Forwarded-Client-Cert
// value of the request's verified client certificate
// (certs.Identity.XFCC), for Outgoing to set on every try.
func WithClientCert(ctx context.Context, xfcc string) context.Context {
	return context.WithValue(ctx, xfccKey{}, xfcc)
}

// setClientCert removes every X-Forwarded-Client-Cert of the outgoing
// header h, the client's own (also spelt with "_" for "-", which CGI-style
// backends read as the same variable), and sets the gateway's from ctx
// (WithClientCert), which the gateway sets only for a certificate its
// handshake verified (Go's verification, or a mesh listener's own).
func setClientCert(ctx context.Context, h http.Header, r *http.Request) {
	DeleteSpellings(h, XFCCField)
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return
	}
	if v, ok := ctx.Value(xfccKey{}).(string); ok {
		h[XFCCField] = []string{v}
	}
}

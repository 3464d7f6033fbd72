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

// WithClientCert returns ctx carrying xfcc, the X-Forwarded-Client-Cert
// value of the request's verified client certificate
// (certs.Identity.XFCC), for Outgoing to set on every try.
func WithClientCert(ctx context.Context, xfcc string) context.Context {
	return context.WithValue(ctx, xfccKey{}, xfcc)
}

// setClientCert removes every X-Forwarded-Client-Cert of the outgoing
// header h, the client's own (also spelt with "_" for "-", which CGI-style
// backends read as the same variable), and sets the gateway's from ctx
// (WithClientCert) when r's certificate was verified.
func setClientCert(ctx context.Context, h http.Header, r *http.Request) {
	delete(h, XFCCField)
	for k := range h {
		if len(k) == len(XFCCField) && strings.ContainsRune(k, '_') && strings.EqualFold(strings.ReplaceAll(k, "_", "-"), XFCCField) {
			delete(h, k)
		}
	}
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return
	}
	if v, ok := ctx.Value(xfccKey{}).(string); ok {
		h[XFCCField] = []string{v}
	}
}

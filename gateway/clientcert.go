package gateway

import (
	"context"
	"net/http"
	"strings"

	"github.com/impulse-agent/impulse-agent/gateway/certs"
)

// headerXFCC carries a verified client certificate to backends, in Envoy's
// format (certs.Identity.XFCC).
const headerXFCC = "X-Forwarded-Client-Cert"

type xfccKey struct{}

// withClientCert returns ctx carrying r's X-Forwarded-Client-Cert value
// when r's listener forwards client certificates and the handshake
// verified r's (r.TLS.VerifiedChains; net/http and quic-go's http3 both
// set r.TLS); otherwise ctx itself.
func (g *Gateway) withClientCert(ctx context.Context, listener string, r *http.Request) context.Context {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return ctx
	}
	if m := g.tlsSettings.Load(); m == nil || !(*m)[listener].forwardClientCert {
		return ctx
	}
	id, ok := certs.VerifiedIdentity(r.TLS)
	if !ok {
		return ctx
	}
	return context.WithValue(ctx, xfccKey{}, id.XFCC())
}

// setClientCert removes every X-Forwarded-Client-Cert of the outgoing
// header h, the client's own (also spelt with "_" for "-", which CGI-style
// backends read as the same variable), and sets the gateway's from ctx
// (withClientCert) when r's certificate was verified.
func setClientCert(ctx context.Context, h http.Header, r *http.Request) {
	delete(h, headerXFCC)
	for k := range h {
		if len(k) == len(headerXFCC) && strings.ContainsRune(k, '_') && strings.EqualFold(strings.ReplaceAll(k, "_", "-"), headerXFCC) {
			delete(h, k)
		}
	}
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return
	}
	if v, ok := ctx.Value(xfccKey{}).(string); ok {
		h[headerXFCC] = []string{v}
	}
}

package ingress

import (
	"context"
	"net/http"
)

// earlyDataKey marks a request context whose request arrived in early data.
type earlyDataKey struct{}

// withEarlyData returns r marked as having arrived in early data: handled
// before the TLS handshake of its connection completed.
func withEarlyData(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), earlyDataKey{}, true))
}

// InEarlyData tells whether the QUIC ingress received r in early data
// (TLS 1.3 0-RTT, RFC 8446 §2.3): before its connection's handshake
// completed. Such a request may be a replay (RFC 8470 §1).
func InEarlyData(r *http.Request) bool {
	v, _ := r.Context().Value(earlyDataKey{}).(bool)
	return v
}

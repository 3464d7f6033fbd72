package gateway

import (
	"context"
	"net/http"
)

// Early data (TLS 1.3 0-RTT, RFC 8446 §2.3) can be replayed by an attacker
// who captured it, so a request that arrived in it may run more than once
// (RFC 8470 §1, RFC 9114 §10.9, RFC 9001 §9.2). The ingress that can
// receive it (QUIC) marks such requests with withEarlyData; the pipeline
// asks earlyDataAction what to do with them.

// earlyAction is what the pipeline does with a request, given whether it
// arrived in early data.
type earlyAction uint8

const (
	// earlyNone: not in early data; forwarded as it came, a client's own
	// Early-Data field included (RFC 8470 §5.1: an intermediary must not
	// remove it; the gateway never reads it).
	earlyNone earlyAction = iota
	// earlyForward: a safe method in early data, forwarded with
	// "Early-Data: 1" so the backend can answer 425 if it cannot risk a
	// replay (RFC 8470 §5.1).
	earlyForward
	// earlyReject: an unsafe method in early data, answered 425 Too Early
	// without reaching a backend; the client retries it after the handshake
	// (RFC 8470 §5.2).
	earlyReject
)

// earlyDataAction decides for a request with method that arrived in early
// data (early) or not. Safe methods (RFC 9110 §9.2.1: GET, HEAD, OPTIONS,
// TRACE) are forwarded, marked; every other method, including ones the
// gateway does not know, is refused, since only safe ones can be replayed
// without side effects.
func earlyDataAction(method string, early bool) earlyAction {
	if !early {
		return earlyNone
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return earlyForward
	}
	return earlyReject
}

// earlyDataOne is the value the gateway sets (RFC 8470 §5.1: "1" is the
// only one defined).
var earlyDataOne = []string{"1"}

// earlyDataKey marks a request context whose request arrived in early data.
type earlyDataKey struct{}

// withEarlyData returns r marked as having arrived in early data: handled
// before the TLS handshake of its connection completed.
func withEarlyData(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), earlyDataKey{}, true))
}

// inEarlyData tells whether an ingress marked r with withEarlyData.
func inEarlyData(r *http.Request) bool {
	v, _ := r.Context().Value(earlyDataKey{}).(bool)
	return v
}

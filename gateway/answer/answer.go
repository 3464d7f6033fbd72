// Package answer is the table of the answers the gateway gives itself:
// every status and x-impulse-error reason the pipeline can produce, with
// the gRPC status a gRPC call gets instead and whether the answer counts
// against the backend's passive health. The handler answers only with
// these values, and the README's answers table is checked against them
// (TestAnswersTableInREADME).
package answer

import (
	"net/http"

	"github.com/impulse-agent/impulse-agent/gateway/transport"
)

// Answer is one answer of the gateway's own.
type Answer struct {
	// Status is the HTTP status (StatusClientClosed: nothing is sent; 0
	// for a Reset: the status recorded is the response's, which had
	// started).
	Status int
	// Reason is the x-impulse-error value and the reason label of the
	// request metrics.
	Reason string
	// GRPC is the gRPC status a gRPC call gets (grpc/grpc
	// doc/statuscodes.md), in a Trailers-Only response or in trailers.
	GRPC int
	// Backend: the answer reports the backend's failure and counts against
	// its passive health (request_timeout only when the backend had the
	// whole body).
	Backend bool
	// Form is how the answer reaches the client.
	Form Form
}

// Form is how an answer reaches the client.
type Form uint8

const (
	// Response: a response with the status and "x-impulse-error: reason"
	// (for gRPC calls a Trailers-Only response).
	Response Form = iota
	// StreamError: a malformed request (RFC 9114 §4.1.2): H3_MESSAGE_ERROR
	// over HTTP/3, a reset over HTTP/2, a 400 over HTTP/1.1; counted as a
	// 400.
	StreamError
	// Reset: the response had started: the stream is reset (HTTP/1.1: the
	// connection closed), or gRPC trailers end it where they can.
	Reset
	// Nothing: the client went away first; counted as 499.
	Nothing
)

// StatusClientClosed is the status recorded when the client went away
// before an answer (nginx's 499): logged and counted, never sent.
const StatusClientClosed = transport.StatusClientClosed

// gRPC status codes (grpc/grpc doc/statuscodes.md).
const (
	GRPCDeadlineExceeded  = 4
	GRPCResourceExhausted = 8
	GRPCUnimplemented     = 12
	GRPCInternal          = 13
	GRPCUnavailable       = 14
	GRPCCanceled          = 1
	GRPCUnknown           = 2
	GRPCUnauthenticated   = 16
	GRPCPermissionDenied  = 7
)

// The answers. Where the status depends on the moment (a reset after the
// response started, trailers for gRPC), the entry is the one recorded.
var (
	InvalidPath          = Answer{400, transport.ReasonInvalidPath, GRPCInternal, false, Response}
	InvalidAuthority     = Answer{400, "invalid_authority", GRPCInternal, false, StreamError}
	InvalidMethod        = Answer{400, "invalid_method", GRPCInternal, false, StreamError}
	InvalidRequest       = Answer{400, transport.ReasonInvalidRequest, GRPCInternal, false, Response}
	NoRoute              = Answer{404, transport.ReasonNoRoute, GRPCUnimplemented, false, Response}
	MethodNotSupported   = Answer{501, transport.ReasonNotImplemented, GRPCUnimplemented, false, Response}
	UpgradeNotAllowed    = Answer{403, "upgrade_not_allowed", GRPCUnknown, false, Response}
	WebSocketHandshake   = Answer{400, "invalid_websocket_handshake", GRPCInternal, false, Response}
	UpgradeBackend       = Answer{501, "upgrade_unsupported_backend", GRPCUnimplemented, false, Response}
	UpgradeRefused       = Answer{502, "upgrade_refused", GRPCUnavailable, false, Response}
	TooEarly             = Answer{425, "too_early", GRPCUnavailable, false, Response}
	URITooLong           = Answer{414, "uri_too_long", GRPCResourceExhausted, false, Response}
	RateLimited          = Answer{429, "rate_limited", GRPCResourceExhausted, false, Response}
	BodyTooLarge         = Answer{413, "body_too_large", GRPCResourceExhausted, false, Response}
	ClientBodyTimeout    = Answer{408, "client_body_timeout", GRPCDeadlineExceeded, false, Response}
	Pending              = Answer{503, transport.ReasonPending, GRPCUnavailable, false, Response}
	NoBackend            = Answer{503, transport.ReasonNoBackend, GRPCUnavailable, false, Response}
	Overloaded           = Answer{503, "overloaded", GRPCUnavailable, false, Response}
	Connect              = Answer{502, transport.ReasonConnect, GRPCUnavailable, true, Response}
	TLS                  = Answer{502, transport.ReasonTLS, GRPCUnavailable, true, Response}
	BackendReset         = Answer{502, transport.ReasonReset, GRPCUnavailable, true, Response}
	InvalidResponse      = Answer{502, transport.ReasonInvalidResponse, GRPCUnavailable, true, Response}
	ResponseTimeout      = Answer{504, transport.ReasonResponseTimeout, GRPCDeadlineExceeded, true, Response}
	RequestTimeout       = Answer{504, "request_timeout", GRPCDeadlineExceeded, true, Response}
	BodyFailed           = Answer{0, transport.ReasonBodyFailed, GRPCInternal, true, Reset}
	BodyIdleTimeout      = Answer{0, "backend_body_idle_timeout", GRPCInternal, true, Reset}
	ClientCanceled       = Answer{StatusClientClosed, transport.ReasonClientCanceled, GRPCCanceled, false, Nothing}
	ClientBodyIncomplete = Answer{400, transport.ReasonClientBodyIncomplete, GRPCInternal, false, StreamError}
	ClientBodyMalformed  = Answer{400, transport.ReasonClientBodyMalformed, GRPCInternal, false, StreamError}
	GRPCTimeout          = Answer{504, "grpc_timeout", GRPCDeadlineExceeded, false, Response}
	GRPCTimeoutInvalid   = Answer{400, "invalid_grpc_timeout", GRPCInternal, false, Response}
	AuthRequired         = Answer{401, "auth_required", GRPCUnauthenticated, false, Response}
	AuthInvalid          = Answer{401, "auth_invalid", GRPCUnauthenticated, false, Response}
	AuthUnavailable      = Answer{503, "auth_unavailable", GRPCUnavailable, false, Response}
	// AuthForbidden: a route's jwt verified the token, which lacks a claim
	// the route forwards (RFC 6750 §3.1 insufficient_scope).
	AuthForbidden = Answer{403, "auth_forbidden", GRPCPermissionDenied, false, Response}
	// AuthMalformed: a route's jwt got a request with more than one
	// Authorization field (RFC 6750 §3.1 invalid_request: a repeated
	// parameter is a malformed request, 400); gRPC INTERNAL, as every 400.
	AuthMalformed = Answer{400, "auth_malformed", GRPCInternal, false, Response}
	// AuthBusy: basic_auth would compare a password with bcrypt and every
	// slot of the gateway is taken (auth.BcryptSlots); with Retry-After.
	AuthBusy = Answer{429, "auth_busy", GRPCResourceExhausted, false, Response}
	// IPDenied: the client address is not allowed by a listener's or
	// route's ip_allow / ip_deny.
	IPDenied = Answer{403, "ip_denied", GRPCPermissionDenied, false, Response}
	// CORSDenied: a CORS preflight the route's cors block does not allow
	// (origin, method or a requested field); it carries no CORS field.
	CORSDenied = Answer{403, "cors_denied", GRPCPermissionDenied, false, Response}
	// IntentionDenied: on a mesh listener, the Consul intentions deny the
	// peer's service this request (an L7 permission, an L4 deny that came
	// into force after the connection opened, or the default policy).
	IntentionDenied = Answer{403, "intention_denied", GRPCPermissionDenied, false, Response}
)

// All lists every answer, in the README table's order.
var All = []Answer{
	InvalidPath, InvalidAuthority, InvalidMethod, InvalidRequest, NoRoute, MethodNotSupported,
	UpgradeNotAllowed, WebSocketHandshake, UpgradeBackend, UpgradeRefused, TooEarly, URITooLong,
	RateLimited, BodyTooLarge, ClientBodyTimeout, Pending, NoBackend, Overloaded,
	Connect, TLS, BackendReset, InvalidResponse, ResponseTimeout, RequestTimeout,
	BodyFailed, BodyIdleTimeout, ClientCanceled, ClientBodyIncomplete, ClientBodyMalformed,
	GRPCTimeout, GRPCTimeoutInvalid, AuthRequired, AuthInvalid, AuthMalformed, AuthForbidden, AuthUnavailable, AuthBusy,
	IPDenied,
	CORSDenied,
	IntentionDenied,
}

// byReason indexes All.
var byReason = func() map[string]Answer {
	m := make(map[string]Answer, len(All))
	for _, a := range All {
		m[a.Reason] = a
	}
	return m
}()

// Of is the answer with reason; false for a reason not in the table.
func Of(reason string) (Answer, bool) {
	a, ok := byReason[reason]
	return a, ok
}

// ForFailure is the answer to a round trip that failed with status and
// reason (transport.Classify's): the table's, or a bare 502 for a reason
// the table lacks (never: a test checks Classify's).
func ForFailure(status int, reason string) Answer {
	if a, ok := byReason[reason]; ok && a.Status == status {
		return a
	}
	return Answer{Status: status, Reason: reason, GRPC: GRPCOfHTTP(status), Backend: status >= 500}
}

// GRPCOfHTTP maps an HTTP status the gateway answers with to the gRPC
// status, as Envoy's router does for gRPC requests it cannot forward (and
// gRPC's "HTTP to gRPC status code mapping" for the rest): a gRPC client
// reports UNAVAILABLE and retries instead of "unexpected content-type".
func GRPCOfHTTP(status int) int {
	switch status {
	case http.StatusNotFound, http.StatusNotImplemented:
		return GRPCUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusTooEarly:
		return GRPCUnavailable
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return GRPCDeadlineExceeded
	case http.StatusTooManyRequests, http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong,
		http.StatusRequestHeaderFieldsTooLarge:
		return GRPCResourceExhausted
	case http.StatusBadRequest:
		return GRPCInternal
	case http.StatusUnauthorized:
		return GRPCUnauthenticated
	}
	return GRPCUnknown
}

package gateway

import (
	"net/http"
	"net/url"
	"strconv"
)

// gRPC status codes the gateway answers with (grpc/grpc doc/statuscodes.md).
const (
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnimplemented     = 12
	grpcDeadlineExceeded  = 4
	grpcResourceExhausted = 8
	grpcUnknown           = 2
)

// grpcStatusFor maps the gateway's own HTTP answer to a gRPC status, as
// Envoy's router does for gRPC requests it cannot forward (and gRPC's
// "HTTP to gRPC status code mapping" for the rest): a gRPC client reports
// UNAVAILABLE and retries, instead of "unexpected content-type".
func grpcStatusFor(status int) int {
	switch status {
	case http.StatusNotFound, http.StatusNotImplemented:
		return grpcUnimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusTooEarly:
		return grpcUnavailable
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return grpcDeadlineExceeded
	case http.StatusTooManyRequests, http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong,
		http.StatusRequestHeaderFieldsTooLarge:
		return grpcResourceExhausted
	case http.StatusBadRequest:
		return grpcInternal
	}
	return grpcUnknown
}

// writeGRPCError answers a gRPC request with a Trailers-Only response
// (gRPC over HTTP/2, "Responses"): HTTP 200, content-type application/grpc,
// grpc-status and grpc-message (the x-impulse-error reason, percent-encoded
// as the spec asks) in the only header section, and no body, so the
// stream ends with it.
func writeGRPCError(w http.ResponseWriter, status int, reason string) {
	h := w.Header()
	h["Content-Type"] = []string{"application/grpc"}
	h["Grpc-Status"] = []string{strconv.Itoa(grpcStatusFor(status))}
	h["Grpc-Message"] = []string{url.PathEscape(reason)}
	h["X-Impulse-Error"] = []string{reason}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusOK)
}

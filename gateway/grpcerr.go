package gateway

import (
	"net/http"
	"net/url"
	"strconv"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
)

// gRPC status codes the gateway answers with (grpc/grpc doc/statuscodes.md).
const (
	grpcInternal          = 13
	grpcUnavailable       = 14
	grpcUnimplemented     = 12
	grpcDeadlineExceeded  = 4
	grpcResourceExhausted = 8
	grpcUnknown           = 2
	grpcCanceled          = 1
	grpcPermissionDenied  = 7
	grpcUnauthenticated   = 16
)

// writeGRPCError answers a gRPC request with a's Trailers-Only response
// (gRPC over HTTP/2, "Responses"): HTTP 200, content-type application/grpc,
// grpc-status and grpc-message (the x-impulse-error reason, percent-encoded
// as the spec asks) in the only header section, and no body, so the
// stream ends with it.
func writeGRPCError(w http.ResponseWriter, a answer.Answer) {
	h := w.Header()
	h["Content-Type"] = []string{"application/grpc"}
	h["Grpc-Status"] = []string{strconv.Itoa(a.GRPC)}
	h["Grpc-Message"] = []string{url.PathEscape(a.Reason)}
	h["X-Impulse-Error"] = []string{a.Reason}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusOK)
}

// grpcCodeNames are the canonical names of the gRPC status codes
// (grpc/grpc doc/statuscodes.md), the grpc_status label.
var grpcCodeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
	"PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
	"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
}

// grpcCodeName is the canonical name of a grpc-status value: UNKNOWN for a
// code outside 0..16 or a value that is not a number (grpc-go reports a
// malformed grpc-status as UNKNOWN too), so the label set stays bounded.
func grpcCodeName(v string) string {
	if n, err := strconv.Atoi(v); err == nil && n >= 0 && n < len(grpcCodeNames) {
		return grpcCodeNames[n]
	}
	return grpcCodeNames[grpcUnknown]
}

// grpcOutcome is the gRPC status the client of a gRPC call ends up with,
// as the code name recorded next to the HTTP status (status, as recorded):
// the grpc-status the response carried (trailers, or the Trailers-Only
// header section, the gateway's own answers included); else CANCELLED for
// a client that went away (499); else INTERNAL for a gRPC response that
// ended without a status (a stream reset after it started: grpc-go reports
// RST_STREAM INTERNAL_ERROR so); else what a gRPC client makes of the HTTP
// status ("HTTP to gRPC Status Code Mapping", grpc/grpc
// doc/http-grpc-status-mapping.md, as grpc-go applies it).
func (c *grpcCall) outcome(status int) string {
	h := c.w.Header()
	if v := h[http.TrailerPrefix+"Grpc-Status"]; len(v) > 0 {
		return grpcCodeName(v[0])
	}
	if v := h["Grpc-Status"]; len(v) > 0 {
		return grpcCodeName(v[0])
	}
	switch {
	case status == transport.StatusClientClosed:
		return grpcCodeNames[grpcCanceled]
	case c.frames != nil:
		return grpcCodeNames[grpcInternal]
	}
	return grpcCodeNames[grpcStatusOfHTTP(status)]
}

// grpcStatusOfHTTP is the gRPC status a client derives from a response's
// HTTP status when it carries no grpc-status.
func grpcStatusOfHTTP(status int) int {
	switch status {
	case http.StatusBadRequest:
		return grpcInternal
	case http.StatusUnauthorized:
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound:
		return grpcUnimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return grpcUnavailable
	case http.StatusOK:
		return grpcInternal // a 200 without grpc-status (or not gRPC at all)
	}
	return grpcUnknown
}

package upstream

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
)

// grpcHealthPath is the gRPC method of the standard health service
// (grpc/grpc doc/health-checking.md): POST /grpc.health.v1.Health/Check.
const grpcHealthPath = "/grpc.health.v1.Health/Check"

// maxGRPCCheckResponse bounds the response body a gRPC check reads. A
// HealthCheckResponse is a few bytes; anything much larger is not one.
const maxGRPCCheckResponse = 64 << 10

// maxGRPCMessageInReason bounds the backend's grpc-message quoted in a
// failure reason (/v1/backends, logs).
const maxGRPCMessageInReason = 200

// ReasonGRPCNeedsHTTP2 is the active-check failure of a gRPC check against
// an http:// (HTTP/1.1) backend, whose scheme is known only at run time
// (a discovered instance): gRPC runs over HTTP/2 only.
const ReasonGRPCNeedsHTTP2 = "grpc check needs an h2c:// or https:// backend, not http:// (HTTP/1.1)"

// grpcProbe returns the gRPC health check of b: one unary
// grpc.health.v1.Health/Check call asking about cfg.GRPCService, sent
// through b's own round-tripper. SERVING passes; every other outcome fails
// with a reason: "grpc NOT_SERVING", "grpc SERVICE_UNKNOWN" (the service
// is not registered), "grpc-status UNIMPLEMENTED: MESSAGE" (any non-OK
// status, e.g. no health service at all), "status N" (an HTTP status other
// than 200), "not a gRPC response ...", a transport reason
// (backend_connect_failed, backend_tls_failed, backend_reset), or
// "timeout" (set by health.RunChecks).
//
// Why a hand-built call over b.Transport rather than a grpc-go
// ClientConn: the check must see the backend exactly as traffic does —
// the same TLS configuration and ALPN check, the same h2c prior-knowledge
// connection, the same resolved addresses (DNS refresh) and connect
// timeout — and report failures in the same words. A ClientConn per
// backend would dial on its own, with its own reconnect backoff that
// delays and blurs connect failures, and would be one more connection
// pool per backend to keep in step with membership. The wire format of a
// unary call is small (gRPC over HTTP/2, PROTOCOL-HTTP2.md): a POST with
// content-type application/grpc and te: trailers, one length-prefixed
// message each way, grpc-status in the trailers (or in the headers of a
// Trailers-Only response). The messages themselves are the generated
// grpc_health_v1 types, marshalled by google.golang.org/protobuf: the
// schema comes from its owners, not from hand-written wire bytes. (That
// package links grpc-go into the binary, about 6 MB, which the OTLP gRPC
// exporter of interface.md's tracing block needs as well.)
func grpcProbe(b *Backend, cfg *health.ActiveConfig) health.Probe {
	if b.Scheme == transport.SchemeHTTP {
		return func(context.Context) (bool, string) { return false, ReasonGRPCNeedsHTTP2 }
	}
	target := (&url.URL{Scheme: transport.URLScheme(b.Scheme), Host: b.Addr(), Path: grpcHealthPath}).String()
	msg, err := proto.Marshal(&healthpb.HealthCheckRequest{Service: cfg.GRPCService})
	if err != nil { // a message of one string field always marshals
		return func(context.Context) (bool, string) { return false, "grpc request: " + err.Error() }
	}
	frame := make([]byte, 5+len(msg)) // uncompressed flag 0, big-endian length, message
	binary.BigEndian.PutUint32(frame[1:5], uint32(len(msg)))
	copy(frame[5:], msg)
	return func(ctx context.Context) (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(frame))
		if err != nil {
			return false, "request: " + err.Error()
		}
		req.Header["Content-Type"] = []string{"application/grpc"}
		req.Header["Te"] = []string{"trailers"}
		req.Header["User-Agent"] = []string{"impulse-agent-health-check"}
		if dl, ok := ctx.Deadline(); ok {
			req.Header["Grpc-Timeout"] = []string{grpcTimeout(time.Until(dl))}
		}
		resp, err := b.Transport.RoundTrip(req)
		if err != nil {
			if ctx.Err() != nil {
				return false, "timeout"
			}
			_, reason := transport.Classify(ctx, err)
			return false, reason
		}
		defer resp.Body.Close()
		return grpcCheckResult(ctx, resp)
	}
}

// grpcCheckResult reads one Health/Check response to its end and judges it.
func grpcCheckResult(ctx context.Context, resp *http.Response) (bool, string) {
	if resp.StatusCode != http.StatusOK {
		return false, "status " + strconv.Itoa(resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/grpc") {
		return false, fmt.Sprintf("not a gRPC response (content-type %q)", ct)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxGRPCCheckResponse+1))
	if err != nil {
		if ctx.Err() != nil {
			return false, "timeout"
		}
		return false, transport.ReasonReset // the stream broke off mid-response
	}
	if len(body) > maxGRPCCheckResponse {
		return false, "grpc response larger than 64 KiB"
	}
	// grpc-status is in the trailers, or in the only header section of a
	// Trailers-Only response.
	st, msg := resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")
	if st == "" {
		st, msg = resp.Header.Get("Grpc-Status"), resp.Header.Get("Grpc-Message")
	}
	switch code, err := strconv.Atoi(st); {
	case st == "" || err != nil || code < 0:
		return false, fmt.Sprintf("grpc response without a valid grpc-status (%q)", st)
	case code != 0:
		if m, err := url.PathUnescape(msg); err == nil {
			msg = m
		}
		if len(msg) > maxGRPCMessageInReason {
			msg = msg[:maxGRPCMessageInReason] + "..."
		}
		reason := "grpc-status " + grpcCodeName(code)
		if msg != "" {
			reason += ": " + msg
		}
		return false, reason
	}
	if len(body) < 5 || body[0] != 0 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		// We send no grpc-accept-encoding, so the server must not compress
		// (flag 1); one message and nothing else is a unary answer.
		return false, "grpc response is not one uncompressed message"
	}
	var out healthpb.HealthCheckResponse
	if err := proto.Unmarshal(body[5:], &out); err != nil {
		return false, "grpc response: " + err.Error()
	}
	if s := out.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return false, "grpc " + s.String()
	}
	return true, ""
}

// grpcTimeout formats d as a grpc-timeout value: at most 8 digits and a
// unit (gRPC over HTTP/2, "Requests"), here milliseconds, rounded up so a
// check never asks for less than its budget, or seconds when that is too
// long.
func grpcTimeout(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	if ms < 1 {
		ms = 1
	}
	if ms < 1e8 {
		return strconv.FormatInt(int64(ms), 10) + "m"
	}
	return strconv.FormatInt(min(int64(d/time.Second), 1e8-1), 10) + "S"
}

// grpcCodeNames are the canonical names of gRPC status codes
// (grpc/grpc doc/statuscodes.md).
var grpcCodeNames = [...]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// grpcCodeName returns the canonical name of code, or its number for a
// code the spec does not define.
func grpcCodeName(code int) string {
	if code < len(grpcCodeNames) {
		return grpcCodeNames[code]
	}
	return strconv.Itoa(code)
}

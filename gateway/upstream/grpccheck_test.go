package upstream

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

// grpcFrame is one length-prefixed gRPC message with compression flag flag.
func grpcFrame(flag byte, msg []byte) string {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flag
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return string(append(b, msg...))
}

// TestGRPCCheckResult: how one Health/Check response is judged, for the
// shapes a real server rarely sends (the end-to-end cases are in
// gateway/grpchealth_test.go).
func TestGRPCCheckResult(t *testing.T) {
	serving, _ := proto.Marshal(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
	notServing, _ := proto.Marshal(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING})
	for _, c := range []struct {
		name            string
		status          int
		ct, body        string
		header, trailer http.Header
		ok              bool
		reason          string
	}{
		{"serving", 200, "application/grpc", grpcFrame(0, serving), nil, http.Header{"Grpc-Status": {"0"}}, true, ""},
		{"serving+proto", 200, "application/grpc+proto", grpcFrame(0, serving), nil, http.Header{"Grpc-Status": {"0"}}, true, ""},
		{"not serving", 200, "application/grpc", grpcFrame(0, notServing), nil, http.Header{"Grpc-Status": {"0"}}, false, "grpc NOT_SERVING"},
		{"empty message is UNKNOWN", 200, "application/grpc", grpcFrame(0, nil), nil, http.Header{"Grpc-Status": {"0"}}, false, "grpc UNKNOWN"},
		{"trailers-only", 200, "application/grpc", "", http.Header{"Grpc-Status": {"14"}, "Grpc-Message": {"going%20away"}}, nil, false, "grpc-status UNAVAILABLE: going away"},
		{"code without a name", 200, "application/grpc", "", http.Header{"Grpc-Status": {"42"}}, nil, false, "grpc-status 42"},
		{"long message cut", 200, "application/grpc", "", http.Header{"Grpc-Status": {"13"}, "Grpc-Message": {strings.Repeat("x", 300)}}, nil, false,
			"grpc-status INTERNAL: " + strings.Repeat("x", maxGRPCMessageInReason) + "..."},
		{"no grpc-status", 200, "application/grpc", grpcFrame(0, serving), nil, nil, false, `grpc response without a valid grpc-status ("")`},
		{"bad grpc-status", 200, "application/grpc", "", http.Header{"Grpc-Status": {"ok"}}, nil, false, `grpc response without a valid grpc-status ("ok")`},
		{"compressed", 200, "application/grpc", grpcFrame(1, serving), nil, http.Header{"Grpc-Status": {"0"}}, false, "grpc response is not one uncompressed message"},
		{"two messages", 200, "application/grpc", grpcFrame(0, serving) + grpcFrame(0, serving), nil, http.Header{"Grpc-Status": {"0"}}, false, "grpc response is not one uncompressed message"},
		{"no message", 200, "application/grpc", "", nil, http.Header{"Grpc-Status": {"0"}}, false, "grpc response is not one uncompressed message"},
		{"too large", 200, "application/grpc", strings.Repeat("x", maxGRPCCheckResponse+1), nil, http.Header{"Grpc-Status": {"0"}}, false, "grpc response larger than 64 KiB"},
		{"http status", 404, "text/plain", "no", nil, nil, false, "status 404"},
		{"not grpc", 200, "text/html", "<p>", nil, nil, false, `not a gRPC response (content-type "text/html")`},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{"Content-Type": {c.ct}}
			for k, v := range c.header {
				h[k] = v
			}
			resp := &http.Response{StatusCode: c.status, Header: h, Body: io.NopCloser(strings.NewReader(c.body)), Trailer: c.trailer}
			ok, reason := grpcCheckResult(context.Background(), resp)
			if ok != c.ok || reason != c.reason {
				t.Errorf("got %v %q, want %v %q", ok, reason, c.ok, c.reason)
			}
		})
	}
}

// TestGRPCTimeout: grpc-timeout values have at most 8 digits and never
// ask for less than the check's budget.
func TestGRPCTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Second:                  "1000m",
		1500 * time.Microsecond:      "2m",
		0:                            "1m",
		-time.Second:                 "1m",
		99999999 * time.Millisecond:  "99999999m",
		100000000 * time.Millisecond: "100000S",
		1 << 62:                      "99999999S",
	} {
		if got := grpcTimeout(d); got != want {
			t.Errorf("grpcTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}

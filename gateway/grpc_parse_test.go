package gateway

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestParseGRPCTimeout: TimeoutValue is 1 to 8 ASCII digits, TimeoutUnit
// one of H M S m u n (gRPC over HTTP/2, "Requests"); anything else is
// malformed.
func TestParseGRPCTimeout(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1H", time.Hour, true},
		{"2M", 2 * time.Minute, true},
		{"30S", 30 * time.Second, true},
		{"100m", 100 * time.Millisecond, true},
		{"250u", 250 * time.Microsecond, true},
		{"7n", 7, true},
		{"0m", 0, true},                                   // expired at once, as grpc-go takes it
		{"00000010S", 10 * time.Second, true},             // leading zeros count as digits
		{"99999999S", 99999999 * time.Second, true},       // 8 digits
		{"99999999H", time.Duration(math.MaxInt64), true}, // beyond time.Duration: clamped
		{"", 0, false},
		{"S", 0, false},          // no digits
		{"5", 0, false},          // no unit
		{"123456789S", 0, false}, // 9 digits
		{"5s", 0, false},         // units are case-sensitive
		{"5h", 0, false},
		{"-5S", 0, false},
		{"+5S", 0, false},
		{" 5S", 0, false},
		{"5 S", 0, false},
		{"5.5S", 0, false},
		{"1e3m", 0, false},
		{"0x10S", 0, false},
		{"٣S", 0, false}, // a non-ASCII digit
	} {
		got, ok := parseGRPCTimeout(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseGRPCTimeout(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestGRPCFrames: message boundaries of a length-prefixed gRPC body,
// whatever the read sizes.
func TestGRPCFrames(t *testing.T) {
	two := grpcMessage("hello") + grpcMessage("")
	for _, tt := range []struct {
		name   string
		chunks []string
		at     bool
	}{
		{"nothing yet", nil, true},
		{"whole message", []string{grpcMessage("hello")}, true},
		{"two in one read", []string{two}, true},
		{"prefix split", []string{two[:2], two[2:]}, true},
		{"byte by byte", split(two, 1), true},
		{"prefix only", []string{two[:5]}, false},
		{"part of the prefix", []string{two[:3]}, false},
		{"message cut", []string{two[:7]}, false},
		{"second prefix cut", []string{two[:12]}, false},
		{"empty message", []string{grpcMessage("")}, true},
	} {
		var f grpcFrames
		for _, c := range tt.chunks {
			f.feed([]byte(c))
		}
		if f.atBoundary() != tt.at {
			t.Errorf("%s: atBoundary %v, want %v", tt.name, f.atBoundary(), tt.at)
		}
	}
}

func split(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// TestGRPCOutcome: the recorded gRPC status is the response's grpc-status
// (trailers first, then a Trailers-Only header section), else what the
// client makes of how the call ended.
func TestGRPCOutcome(t *testing.T) {
	for _, tt := range []struct {
		name    string
		header  map[string]string
		started bool // a gRPC response body was being forwarded
		status  int
		want    string
	}{
		{"trailers", map[string]string{http.TrailerPrefix + "Grpc-Status": "0"}, true, 200, "OK"},
		{"trailers win", map[string]string{"Grpc-Status": "0", http.TrailerPrefix + "Grpc-Status": "14"}, true, 200, "UNAVAILABLE"},
		{"Trailers-Only", map[string]string{"Grpc-Status": "5"}, false, 200, "NOT_FOUND"},
		{"gateway's own answer", map[string]string{"Grpc-Status": "12"}, false, 404, "UNIMPLEMENTED"},
		{"code out of range", map[string]string{"Grpc-Status": "17"}, false, 200, "UNKNOWN"},
		{"not a number", map[string]string{"Grpc-Status": "ok"}, false, 200, "UNKNOWN"},
		{"client went away", nil, true, 499, "CANCELLED"},
		{"reset after the response started", nil, true, 502, "INTERNAL"},
		{"non-gRPC 503 from the backend", nil, false, 503, "UNAVAILABLE"},
		{"non-gRPC 401", nil, false, 401, "UNAUTHENTICATED"},
		{"non-gRPC 418", nil, false, 418, "UNKNOWN"},
	} {
		w := httptest.NewRecorder()
		for k, v := range tt.header {
			w.Header()[k] = []string{v}
		}
		c := &grpcCall{w: w}
		if tt.started {
			c.frames = new(grpcFrames)
		}
		if got := c.outcome(tt.status); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

package wire

import (
	"net/http"
	"strings"
	"testing"
)

func TestSaneRequestID(t *testing.T) {
	tests := []struct {
		name string
		vals []string
		want bool
	}{
		{"none", nil, false},
		{"empty", []string{""}, false},
		{"uuid", []string{"3f0c2a4e-6b1d-4c8e-9a57-0d2b7e4f1a93"}, true},
		{"one byte", []string{"a"}, true},
		{"visible ascii", []string{"!~azAZ09-_.:;/=+"}, true},
		{"max length", []string{strings.Repeat("a", MaxRequestIDBytes)}, true},
		{"too long", []string{strings.Repeat("a", MaxRequestIDBytes+1)}, false},
		{"space", []string{"a b"}, false},
		{"tab", []string{"a\tb"}, false},
		{"control char", []string{"a\x01b"}, false},
		{"del", []string{"a\x7fb"}, false},
		{"non-ascii", []string{"é"}, false},
		{"comma list", []string{"a,b"}, false},
		{"two fields", []string{"a", "b"}, false},
	}
	for _, tt := range tests {
		if got := saneRequestID(tt.vals); got != tt.want {
			t.Errorf("%s: saneRequestID(%q) = %v, want %v", tt.name, tt.vals, got, tt.want)
		}
	}
}

func TestNewRequestID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newRequestID()
		if len(id) != 1 || len(id[0]) != 32 || strings.Trim(id[0], "0123456789abcdef") != "" {
			t.Fatalf("newRequestID() = %q, want 32 lowercase hex digits", id)
		}
		if !saneRequestID(id) {
			t.Fatalf("newRequestID() = %q is not sane", id)
		}
		if seen[id[0]] {
			t.Fatalf("newRequestID() repeated %q", id[0])
		}
		seen[id[0]] = true
	}
}

func TestRequestIDOf(t *testing.T) {
	kept := []string{"abc-123"}
	r := &http.Request{Header: http.Header{RequestIDField: kept}}
	if got := RequestID(r); &got[0] != &kept[0] {
		t.Errorf("sane ID not kept as is: %q", got)
	}
	r = &http.Request{Header: http.Header{RequestIDField: {"a", "b"}}}
	got := RequestID(r)
	if len(got) != 1 || got[0] == "a" || len(got[0]) != 32 {
		t.Errorf("two fields: got %q, want a new ID", got)
	}
	if h := r.Header[RequestIDField]; len(h) != 1 || h[0] != got[0] {
		t.Errorf("request header = %q, want the new ID %q", h, got[0])
	}
	if again := RequestID(r); again[0] != got[0] {
		t.Errorf("second call made another ID: %q, then %q", got[0], again[0])
	}
	r = &http.Request{} // no header map at all
	if got := RequestID(r); r.Header[RequestIDField][0] != got[0] {
		t.Errorf("nil header: not set")
	}
}

// BenchmarkRequestIDKept is the cost of a client's sane ID: a check, no
// allocation.
func BenchmarkRequestIDKept(b *testing.B) {
	r := &http.Request{Header: http.Header{RequestIDField: {"3f0c2a4e-6b1d-4c8e-9a57-0d2b7e4f1a93"}}}
	b.ReportAllocs()
	for b.Loop() {
		_ = RequestID(r)
	}
}

// BenchmarkRequestIDGenerated is the cost of making one up: crypto/rand,
// hex, one allocation.
func BenchmarkRequestIDGenerated(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = newRequestID()
	}
}

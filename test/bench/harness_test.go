package main

import (
	"strings"
	"testing"
)

func TestBufferWarning(t *testing.T) {
	out := "bench: something\n2026/11/30 00:21:03 failed to sufficiently increase receive buffer size (was: 208 kiB, wanted: 7168 kiB, got: 416 kiB). See https://github.com/quic-go/quic-go/wiki/UDP-Buffer-Sizes for details.\n{\"h3\":\"127.0.0.1:1\"}\n"
	if w := bufferWarning(out); !strings.Contains(w, "failed to sufficiently increase receive buffer size") {
		t.Errorf("bufferWarning = %q", w)
	}
	if w := bufferWarning("{\"h3\":\"127.0.0.1:1\"}\n"); w != "" {
		t.Errorf("bufferWarning without a warning = %q", w)
	}
}

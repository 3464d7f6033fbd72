package hcl

import (
	"testing"
	"time"
)

// TestListenerLimits: a listener without a limits block gets the
// documented defaults; every attribute of the block is read; an upstream's
// max_request_body_bytes is kept.
func TestListenerLimits(t *testing.T) {
	cfg, diags := Load([]string{"testdata/good/minimal.hcl"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := ListenerLimits{MaxHeaderBytes: 65536, MaxURIBytes: 8192, ReadHeaderTimeout: 10 * time.Second,
		ClientBodyTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute, MaxConcurrentStreams: 250}
	if got := cfg.Listeners[0].Limits; got != want {
		t.Errorf("defaults: %+v, want %+v", got, want)
	}

	cfg, diags = Load([]string{"testdata/good/limits.hcl"})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want = ListenerLimits{MaxHeaderBytes: 32768, MaxURIBytes: 4096, MaxRequestBodyBytes: 10 << 20, ReadHeaderTimeout: 5 * time.Second,
		ClientBodyTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second, MaxConnections: 10000, MaxConcurrentStreams: 100}
	if got := cfg.Listeners[0].Limits; got != want {
		t.Errorf("limits block: %+v, want %+v", got, want)
	}
	if got := cfg.Upstreams[0].Limits.MaxRequestBodyBytes; got != 1<<30 {
		t.Errorf("upstream max_request_body_bytes %d, want %d", got, 1<<30)
	}
}

package hcl

import (
	"strings"
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
	wantUp := UpstreamLimits{MaxRequestBodyBytes: 1 << 30, MaxRequests: 100, MaxRequestsPerBackend: 10, MaxQueue: 50, QueueTimeout: time.Second}
	if got := cfg.Upstreams[0].Limits; got != wantUp {
		t.Errorf("upstream limits %+v, want %+v", got, wantUp)
	}
	if got := cfg.Limits; got != (GlobalLimits{MaxRequests: 5000}) {
		t.Errorf("top-level limits %+v", got)
	}
}

// TestConcurrencyLimitRules: 0 means no limit; a queue needs max_requests
// and queue_timeout, a queue_timeout needs a queue (the golden file
// testdata/bad/concurrency_limits.hcl has the messages).
func TestConcurrencyLimitRules(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`max_requests = 0`, true},
		{`max_requests = 10`, true},
		{`max_requests_per_backend = 3`, true},
		{`max_requests = 10  max_queue = 0`, true},
		{`max_requests = 10  max_queue = 5  queue_timeout = "250ms"`, true},
		{`max_requests = -1`, false},
		{`max_requests_per_backend = -1`, false},
		{`max_queue = 5  queue_timeout = "1s"`, false},                    // no max_requests
		{`max_requests = 0  max_queue = 5  queue_timeout = "1s"`, false},  // likewise
		{`max_requests = 10  max_queue = 5`, false},                       // no queue_timeout
		{`max_requests = 10  queue_timeout = "1s"`, false},                // no queue
		{`max_requests = 10  max_queue = 5  queue_timeout = "0s"`, false}, // a zero timeout
		{`max_requests = 10  max_queue = -5  queue_timeout = "1s"`, false},
	} {
		src := testListener + "upstream \"web\" {\n  route {}\n  backend \"a\" { address = \"http://127.0.0.1:8080\" }\n  limits {\n" +
			strings.ReplaceAll(tc.body, "  ", "\n") + "\n  }\n}\n"
		cfg, diags := Parse("limits.hcl", []byte(src))
		if diags.HasErrors() == tc.ok {
			t.Errorf("%s: ok %v, want %v: %v", tc.body, !diags.HasErrors(), tc.ok, diags)
			continue
		}
		if tc.ok && cfg.Upstreams[0].Limits.MaxQueue == 0 && cfg.Upstreams[0].Limits.QueueTimeout != 0 {
			t.Errorf("%s: a queue timeout without a queue", tc.body)
		}
	}
}

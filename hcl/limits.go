package hcl

import (
	"math"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
)

// Defaults and bounds of listener.limits (interface.md).
const (
	DefaultMaxHeaderBytes       = 64 << 10
	DefaultMaxURIBytes          = 8 << 10
	DefaultReadHeaderTimeout    = 10 * time.Second
	DefaultClientBodyTimeout    = 60 * time.Second
	DefaultListenerIdleTimeout  = 2 * time.Minute
	DefaultMaxConcurrentStreams = 250

	minHeaderBytes       = 1 << 10
	maxHeaderBytes       = 16 << 20
	minURIBytes          = 64
	maxURIBytes          = 1 << 20
	maxConcurrentStreams = 1 << 20
)

// ListenerLimits is listener.limits: protocol limits and defences, every
// field defaulted when absent (DefaultListenerLimits).
type ListenerLimits struct {
	// MaxHeaderBytes bounds a request's header section (431 beyond it),
	// 1 KiB..16 MiB (default 64 KiB).
	MaxHeaderBytes int
	// MaxURIBytes bounds the request target (414), 64 bytes..1 MiB
	// (default 8 KiB).
	MaxURIBytes int
	// MaxRequestBodyBytes bounds a request body (413); 0 (the default)
	// means no limit. An upstream's limits.max_request_body_bytes replaces
	// it.
	MaxRequestBodyBytes int64
	// ReadHeaderTimeout bounds the TLS handshake and each HTTP/1.1 header
	// section (default 10s; > 0).
	ReadHeaderTimeout time.Duration
	// ClientBodyTimeout bounds the wait for a client's next body bytes
	// (408; default 60s; > 0).
	ClientBodyTimeout time.Duration
	// IdleTimeout closes a connection without requests (default 2m; > 0).
	IdleTimeout time.Duration
	// MaxConnections bounds the listener's open connections, TCP and QUIC
	// together; 0 (the default) means no limit.
	MaxConnections int
	// MaxConcurrentStreams bounds the streams of one HTTP/2 or HTTP/3
	// connection, 1..1048576 (default 250).
	MaxConcurrentStreams int
}

// DefaultListenerLimits returns the limits of a listener without a limits
// block.
func DefaultListenerLimits() ListenerLimits {
	return ListenerLimits{
		MaxHeaderBytes:       DefaultMaxHeaderBytes,
		MaxURIBytes:          DefaultMaxURIBytes,
		ReadHeaderTimeout:    DefaultReadHeaderTimeout,
		ClientBodyTimeout:    DefaultClientBodyTimeout,
		IdleTimeout:          DefaultListenerIdleTimeout,
		MaxConcurrentStreams: DefaultMaxConcurrentStreams,
	}
}

// UpstreamLimits is upstream.limits: a body cap and the concurrency
// limits (README "Concurrency limits"). Every count is ≥ 0, 0 (the
// default) meaning none.
type UpstreamLimits struct {
	// MaxRequestBodyBytes replaces the listener's max_request_body_bytes
	// for requests routed to this upstream; 0 (the default) keeps the
	// listener's.
	MaxRequestBodyBytes int64
	// MaxRequests bounds the requests in flight to the upstream (503
	// overloaded with Retry-After beyond it); 0 means none.
	MaxRequests int
	// MaxRequestsPerBackend bounds the requests in flight to each of its
	// backends: a full backend is skipped; 0 means none.
	MaxRequestsPerBackend int
	// MaxQueue is how many requests over MaxRequests may wait in line
	// (FIFO) for a slot; 0 means none (refused at once). It requires
	// MaxRequests and QueueTimeout.
	MaxQueue int
	// QueueTimeout is the longest a request waits in that line (> 0; only
	// with MaxQueue); 0 when there is no queue.
	QueueTimeout time.Duration
}

// GlobalLimits is the top-level limits block.
type GlobalLimits struct {
	// MaxRequests bounds the requests in flight through the whole gateway,
	// tunnels included (503 overloaded with Retry-After beyond it, never
	// queued); 0 (the default) means none.
	MaxRequests int
}

// rawListenerLimits is listener.limits (schema.go holds the other raw
// blocks).
type rawListenerLimits struct {
	DefRange hcl2.Range `hcl:",def_range"`

	MaxHeaderBytes       *hcl2.Attribute `hcl:"max_header_bytes,optional"`
	MaxURIBytes          *hcl2.Attribute `hcl:"max_uri_bytes,optional"`
	MaxRequestBodyBytes  *hcl2.Attribute `hcl:"max_request_body_bytes,optional"`
	ReadHeaderTimeout    *hcl2.Attribute `hcl:"read_header_timeout,optional"`
	ClientBodyTimeout    *hcl2.Attribute `hcl:"client_body_timeout,optional"`
	IdleTimeout          *hcl2.Attribute `hcl:"idle_timeout,optional"`
	MaxConnections       *hcl2.Attribute `hcl:"max_connections,optional"`
	MaxConcurrentStreams *hcl2.Attribute `hcl:"max_concurrent_streams,optional"`
}

// rawUpstreamLimits is upstream.limits.
type rawUpstreamLimits struct {
	DefRange hcl2.Range `hcl:",def_range"`

	MaxRequests           *hcl2.Attribute `hcl:"max_requests,optional"`
	MaxRequestsPerBackend *hcl2.Attribute `hcl:"max_requests_per_backend,optional"`
	MaxQueue              *hcl2.Attribute `hcl:"max_queue,optional"`
	QueueTimeout          *hcl2.Attribute `hcl:"queue_timeout,optional"`
	MaxRequestBodyBytes   *hcl2.Attribute `hcl:"max_request_body_bytes,optional"`
}

// rawGlobalLimits is the top-level limits block.
type rawGlobalLimits struct {
	DefRange hcl2.Range `hcl:",def_range"`

	MaxRequests *hcl2.Attribute `hcl:"max_requests,optional"`
}

func (r *rawGlobalLimits) defRange() hcl2.Range   { return r.DefRange }
func (r *rawListenerLimits) defRange() hcl2.Range { return r.DefRange }
func (r *rawUpstreamLimits) defRange() hcl2.Range { return r.DefRange }

// buildListenerLimits converts listener.limits (nil: the defaults).
func buildListenerLimits(b blk, r *rawListenerLimits) ListenerLimits {
	l := DefaultListenerLimits()
	if r == nil {
		return l
	}
	b = b.child("limits", r.DefRange)
	l.MaxHeaderBytes, _ = b.integer(r.MaxHeaderBytes, DefaultMaxHeaderBytes, minHeaderBytes, maxHeaderBytes)
	l.MaxURIBytes, _ = b.integer(r.MaxURIBytes, DefaultMaxURIBytes, minURIBytes, maxURIBytes)
	body, _ := b.integer(r.MaxRequestBodyBytes, 0, 0, math.MaxInt)
	l.MaxRequestBodyBytes = int64(body)
	l.ReadHeaderTimeout = b.duration(r.ReadHeaderTimeout, DefaultReadHeaderTimeout, positive, 0)
	l.ClientBodyTimeout = b.duration(r.ClientBodyTimeout, DefaultClientBodyTimeout, positive, 0)
	l.IdleTimeout = b.duration(r.IdleTimeout, DefaultListenerIdleTimeout, positive, 0)
	l.MaxConnections, _ = b.integer(r.MaxConnections, 0, 0, maxCount)
	l.MaxConcurrentStreams, _ = b.integer(r.MaxConcurrentStreams, DefaultMaxConcurrentStreams, 1, maxConcurrentStreams)
	return l
}

// buildUpstreamLimits converts upstream.limits (nil: none). Besides each
// value's range: a queue needs a limit to queue behind (max_queue without
// max_requests) and a timeout (max_queue without queue_timeout), and a
// queue_timeout needs a queue. Cross-field errors are reported only when
// the fields involved are valid themselves.
func buildUpstreamLimits(b blk, r *rawUpstreamLimits) UpstreamLimits {
	var l UpstreamLimits
	if r == nil {
		return l
	}
	b = b.child("limits", r.DefRange)
	body, _ := b.integer(r.MaxRequestBodyBytes, 0, 0, math.MaxInt)
	l.MaxRequestBodyBytes = int64(body)
	var reqOK, queueOK bool
	l.MaxRequests, reqOK = b.integer(r.MaxRequests, 0, 0, maxCount)
	l.MaxRequestsPerBackend, _ = b.integer(r.MaxRequestsPerBackend, 0, 0, maxCount)
	l.MaxQueue, queueOK = b.integer(r.MaxQueue, 0, 0, maxCount)
	before := b.errCount()
	l.QueueTimeout = b.duration(r.QueueTimeout, 0, positive, 0)
	timeoutOK := r.QueueTimeout != nil && b.errCount() == before
	switch {
	case l.MaxQueue > 0 && l.MaxRequests == 0 && (reqOK || r.MaxRequests == nil):
		b.errorf(r.MaxQueue, "", "Queue without a limit",
			"a queue holds the requests over max_requests, which is not set (or 0); set max_requests > 0, or remove max_queue.")
	case l.MaxQueue > 0 && r.QueueTimeout == nil:
		b.errorf(r.MaxQueue, "", "Queue without a timeout",
			"set queue_timeout, the longest a request may wait in the queue (e.g. \"1s\").")
	}
	if timeoutOK && l.MaxQueue == 0 && (queueOK || r.MaxQueue == nil) {
		b.errorf(r.QueueTimeout, "", "Timeout without a queue",
			"queue_timeout bounds the wait in the queue, and max_queue is not set (or 0); set max_queue > 0, or remove queue_timeout.")
	}
	if l.MaxQueue == 0 {
		l.QueueTimeout = 0
	}
	return l
}

// buildGlobalLimits converts the top-level limits block (nil: none).
func buildGlobalLimits(b blk, r *rawGlobalLimits) GlobalLimits {
	var l GlobalLimits
	if r == nil {
		return l
	}
	b = b.child("limits", r.DefRange)
	l.MaxRequests, _ = b.integer(r.MaxRequests, 0, 0, maxCount)
	return l
}

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

// UpstreamLimits is upstream.limits. Only max_request_body_bytes is
// implemented; max_requests, max_requests_per_backend, max_queue and
// queue_timeout are accepted with a "Not yet supported" warning.
type UpstreamLimits struct {
	// MaxRequestBodyBytes replaces the listener's max_request_body_bytes
	// for requests routed to this upstream; 0 (the default) keeps the
	// listener's.
	MaxRequestBodyBytes int64
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

// buildUpstreamLimits converts upstream.limits (nil: none). The
// attributes that belong to the admission-control issue are checked for
// their type and range and draw a "Not yet supported" warning.
func buildUpstreamLimits(b blk, r *rawUpstreamLimits) UpstreamLimits {
	var l UpstreamLimits
	if r == nil {
		return l
	}
	b = b.child("limits", r.DefRange)
	body, _ := b.integer(r.MaxRequestBodyBytes, 0, 0, math.MaxInt)
	l.MaxRequestBodyBytes = int64(body)
	for _, a := range []*hcl2.Attribute{r.MaxRequests, r.MaxRequestsPerBackend, r.MaxQueue} {
		if _, ok := b.integer(a, 0, 0, maxCount); ok {
			b.unsupported("upstream.limits."+a.Name, a.Expr.Range())
		}
	}
	if r.QueueTimeout != nil {
		before := b.errCount()
		b.duration(r.QueueTimeout, 0, 0, 0)
		if b.errCount() == before {
			b.unsupported("upstream.limits.queue_timeout", r.QueueTimeout.Expr.Range())
		}
	}
	return l
}

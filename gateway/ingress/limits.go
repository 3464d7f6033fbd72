package ingress

import "time"

// Limits are a listener's protocol limits and defences (the `limits` block
// of interface.md). A zero field means its default, given per field; the
// pipeline checks (URI, body, client_body_timeout, max_connections) follow
// an Apply at once, the server settings (MaxHeaderBytes,
// ReadHeaderTimeout, IdleTimeout, MaxConcurrentStreams) are fixed when the
// listener's sockets are bound (see Listener.Reconfigure).
type Limits struct {
	// MaxHeaderBytes bounds a request's header section, in bytes (default
	// 64 KiB). HTTP/1.1: the request line and fields as Go's server reads
	// them (it allows 4 KiB of slack beyond this); HTTP/2: the advertised
	// SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 §6.5.2, Go adds 320 bytes of
	// per-field overhead); HTTP/3: SETTINGS_MAX_FIELD_SECTION_SIZE and the
	// HEADERS frame (RFC 9114 §4.2.2). Beyond it the server answers 431
	// itself (RFC 6585 §5), before the pipeline: no x-impulse-error.
	MaxHeaderBytes int
	// MaxURIBytes bounds the request target (HTTP/1.1 request-target,
	// :path), in bytes (default 8 KiB, as nginx's large header buffer).
	// Longer targets get 414 uri_too_long (RFC 9110 §15.5.15) before routing.
	MaxURIBytes int
	// MaxRequestBodyBytes bounds a request body, in bytes; 0 means no
	// limit. An upstream's UpstreamConfig.MaxRequestBodyBytes replaces it
	// for the requests routed there. A Content-Length above it gets 413
	// body_too_large (RFC 9110 §15.5.14) before anything is forwarded; a
	// body without one that grows past it is cut there (the backend never
	// gets more) and answered 413, or its stream reset if the response had
	// started.
	MaxRequestBodyBytes int64
	// ReadHeaderTimeout bounds how long a TCP client may take for its TLS
	// handshake and for each HTTP/1.1 request's header section (default
	// 10s; Go's http.Server.ReadHeaderTimeout). On QUIC it is the handshake
	// idle timeout (quic.Config.HandshakeIdleTimeout). HTTP/2 and HTTP/3
	// header blocks have no timer of their own: a connection that opens no
	// complete stream closes after IdleTimeout, and each stuck stream holds
	// one of MaxConcurrentStreams.
	ReadHeaderTimeout time.Duration
	// ClientBodyTimeout bounds how long a read of the request body may wait
	// for the client's next bytes (default 60s; nginx's client_body_timeout:
	// the time between two reads, not the whole body). A client that
	// stalls longer gets 408 client_body_timeout (RFC 9110 §15.5.9), or a
	// stream reset if the response had started; it never counts against
	// the backend's health.
	ClientBodyTimeout time.Duration
	// IdleTimeout closes a connection without a request in flight after
	// this long (default 2m): Go's http.Server.IdleTimeout on TCP; on QUIC
	// http3.Server.IdleTimeout (no request stream open), with the
	// max_idle_timeout transport parameter (RFC 9000 §10.1, the lower of
	// both ends' wins) bounding a silent peer and keep-alive PINGs every
	// half of it, so a request waiting on a slow backend is never cut.
	IdleTimeout time.Duration
	// MaxConnections bounds the open connections of the listener, TCP and
	// QUIC together; 0 means no limit. Beyond it a new TCP connection
	// waits, accepted but not served (its TLS handshake does not start),
	// until one closes; a QUIC connection attempt is refused with
	// CONNECTION_REFUSED (RFC 9000 §20.1), since QUIC has no accept queue.
	MaxConnections int
	// MaxConcurrentStreams bounds the streams a client may open at once on
	// one connection (default 250): SETTINGS_MAX_CONCURRENT_STREAMS on
	// HTTP/2 (RFC 9113 §6.5.2), the initial_max_streams_bidi transport
	// parameter on HTTP/3 (RFC 9000 §4.6).
	MaxConcurrentStreams int
}

// Defaults of Limits.
const (
	defaultMaxHeaderBytes       = 64 << 10
	defaultMaxURIBytes          = 8 << 10
	defaultReadHeaderTimeout    = 10 * time.Second
	defaultClientBodyTimeout    = 60 * time.Second
	defaultIdleTimeout          = 2 * time.Minute
	defaultMaxConcurrentStreams = 250
)

// Resolved is l with every zero default filled in.
func (l Limits) Resolved() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxHeaderBytes, defaultMaxHeaderBytes)
	def(&l.MaxURIBytes, defaultMaxURIBytes)
	def(&l.MaxConcurrentStreams, defaultMaxConcurrentStreams)
	defDur(&l.ReadHeaderTimeout, defaultReadHeaderTimeout)
	defDur(&l.ClientBodyTimeout, defaultClientBodyTimeout)
	defDur(&l.IdleTimeout, defaultIdleTimeout)
	if l.MaxRequestBodyBytes < 0 {
		l.MaxRequestBodyBytes = 0
	}
	if l.MaxConnections < 0 {
		l.MaxConnections = 0
	}
	return l
}

// serverSettings is the part of l a running server cannot change.
func (l Limits) serverSettings() [4]int64 {
	return [4]int64{int64(l.MaxHeaderBytes), int64(l.ReadHeaderTimeout), int64(l.IdleTimeout), int64(l.MaxConcurrentStreams)}
}

// warnFixedLimits logs when an Apply changed limits that running servers
// cannot take over: net/http and quic-go read them without locks, and QUIC
// sends its transport parameters in each handshake. They apply to sockets
// bound later (a restart, or a changed address).
func (l *Listener) warnFixedLimits(lim Limits) {
	var running []Limits
	if l.tcp != nil {
		running = append(running, l.tcp.limits)
	}
	if l.quic != nil {
		running = append(running, l.quic.limits)
	}
	for _, r := range running {
		if r.serverSettings() != lim.serverSettings() {
			l.deps.Log.Warn("listener limits max_header_bytes, read_header_timeout, idle_timeout and max_concurrent_streams apply to sockets bound from now on (a restart, a new address, a protocol turned on); a running socket keeps its own",
				"listener", l.name, "running_tcp", l.tcp != nil && l.tcp.limits.serverSettings() != lim.serverSettings(),
				"running_quic", l.quic != nil && l.quic.limits.serverSettings() != lim.serverSettings())
			return
		}
	}
}

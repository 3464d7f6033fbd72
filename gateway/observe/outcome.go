package observe

import (
	"crypto/x509"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
)

// Outcome is how one request ended, built once by the pipeline's recorder
// and handed to every observer (Observers.Record): the request metrics,
// the gRPC metrics, the access log, the trace's server span, the status
// page's counters and the debug log line. Passive health gets each of its
// Attempts as the try ends (Observers.Attempted). A tunnel's Outcome comes
// when it closes.
type Outcome struct {
	// The request as it arrived.
	Start    time.Time
	Listener string // "" for a request served through Gateway.Handler
	Protocol string // h1, h2 or h3
	Proto    string // as in the request line: "HTTP/2.0"
	Method   string
	Host     string
	Path     string // as the client sent it
	// UpstreamPath is the path the backend got when a route rule
	// rewrote it (strip_prefix, prefix_rewrite: escaped, normal form);
	// "" when none did.
	UpstreamPath string
	Query        string // after "?", as sent
	RequestID    string // x-request-id
	TraceID      string // W3C trace ID; "" when tracing is off
	// ClientAddress is the client's ip:port; SNI the TLS server name it
	// asked for; ClientCert the certificate the handshake verified (nil:
	// none). UserAgent and Referer are the request's fields.
	ClientAddress, SNI string
	// Peer is the TCP or UDP peer of the connection (ip:port): a balancer
	// or forwarder when the client address came from a PROXY header or
	// trusted forwarding headers, else the same as ClientAddress.
	Peer               string
	ClientCert         *x509.Certificate
	UserAgent, Referer string

	// Where it went: the route's path prefix ("" when none matched), the
	// upstream and the backend of the last try (nil: none).
	Route    string
	Upstream *upstream.Upstream
	Backend  *upstream.Backend
	// attempts are the tries sent to backends, in the order they ended
	// (Attempts); an array, so that an Outcome on a handler's stack
	// stays there.
	attempts  [MaxAttempts]Attempt
	nAttempts int

	// What the client got: the status (499: it went away first), the
	// gateway's reason (x-impulse-error; "" for a relayed answer), the
	// gRPC status name of a gRPC call ("" otherwise), the request and
	// response body bytes relayed (for a tunnel, the bytes each way), and
	// how long it took (for a tunnel, how long it was open).
	Status            int
	Reason            string
	GRPCStatus        string
	BytesIn, BytesOut int64
	Duration          time.Duration
	Tunnel            bool
	// Auth is the route's authentication outcome, "method:result" of the
	// deciding method (auth.Method*, auth.Result*; "" when the route has
	// none or the request ended before it); AuthSubject the basic user or
	// named API key let in ("" otherwise). Never a credential.
	Auth, AuthSubject string

	// Span is the request's server span (nil: not traced).
	Span *ServerSpan
}

// MaxAttempts bounds the tries of one request: every attempt and every
// hedged copy (retry.MaxAttempts + retry.MaxHedges).
const MaxAttempts = retry.MaxAttempts + retry.MaxHedges

// Attempts are the tries sent to backends, in the order they ended.
func (o *Outcome) Attempts() []Attempt { return o.attempts[:o.nAttempts] }

// UpstreamName is the upstream's name ("" for none).
func (o *Outcome) UpstreamName() string {
	if o.Upstream == nil {
		return ""
	}
	return o.Upstream.Name()
}

// BackendID is the last try's backend ID ("" for none).
func (o *Outcome) BackendID() string {
	if o.Backend == nil {
		return ""
	}
	return o.Backend.ID
}

// Attempt is one try of a request to one backend, once it is over.
type Attempt struct {
	Backend *upstream.Backend
	// Verdict is what the try says of the backend's health (Success,
	// Neutral: not its doing, Failure) and Reason names a failure
	// ("backend_reset", "status 503").
	Verdict  health.Outcome
	Reason   string
	Duration time.Duration // from the try's start to its end
	// Status is the backend's answer (Answered) or the status its
	// failure would be answered with; 0 for a try without either (lost,
	// canceled before an answer).
	Status   int
	Answered bool
	// Final: the try whose outcome the client got. Lost: a hedged try
	// another try's answer beat. Hedge: a hedged copy.
	Final, Lost, Hedge bool
	// ErrType is the try span's error.type ("" when none).
	ErrType string
	// Trace is the try's client span (nil: not traced).
	Trace *TryTrace
}

// Observers are the consumers of the pipeline's Outcomes.
type Observers struct {
	Metrics *Metrics
	Access  *AccessLog
	Tracing *Tracing
	Traffic *Traffic
	// Log gets a debug line per request when it is at debug level.
	Log hclog.Logger
}

// Attempted ends the try a: it goes to o's attempts, its backend's
// passive health and in-flight count (Backend.Done, exactly once per
// try), and its client span.
func (obs *Observers) Attempted(o *Outcome, a Attempt) {
	if o.nAttempts < len(o.attempts) {
		o.attempts[o.nAttempts] = a
		o.nAttempts++
	}
	a.Backend.Done(a.Verdict, a.Reason, a.Duration)
	a.Trace.finish(a.traceStatus(), a.ErrType, a.Lost)
}

// traceStatus is the status the client span reports: the backend's answer.
func (a *Attempt) traceStatus() int {
	if a.Answered {
		return a.Status
	}
	return 0
}

// Record hands o, complete, to every observer, once per request.
func (obs *Observers) Record(o *Outcome) {
	up := o.UpstreamName()
	obs.Metrics.request(o.Listener, o.Protocol, up, o.Status, o.Reason, o.Duration)
	if o.GRPCStatus != "" {
		obs.Metrics.grpcRequest(o.Listener, o.Protocol, up, o.Status, o.GRPCStatus)
	}
	o.Span.end(o)
	obs.Traffic.record(o)
	obs.Access.record(o)
	if obs.Log.IsDebug() {
		args := []any{"request_id", o.RequestID, "method", o.Method, "host", o.Host, "path", o.Path,
			"status", o.Status, "reason", o.Reason, "upstream", up, "backend", o.BackendID(),
			"duration_ms", float64(o.Duration.Microseconds()) / 1000, "remote", o.ClientAddress}
		if o.GRPCStatus != "" {
			args = append(args, "grpc_status", o.GRPCStatus)
		}
		if o.nAttempts > 1 {
			args = append(args, "attempts", o.nAttempts)
		}
		obs.Log.Debug("request", args...)
	}
}

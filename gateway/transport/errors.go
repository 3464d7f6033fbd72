package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"strings"

	"golang.org/x/net/http2"
)

// Reasons the gateway reports in x-impulse-error and in metrics.
const (
	ReasonConnect         = "backend_connect_failed"  // 502: connect or TLS handshake failed
	ReasonTLS             = "backend_tls_failed"      // 502: certificate verification failed
	ReasonReset           = "backend_reset"           // 502: connection lost before a response
	ReasonResponseTimeout = "response_header_timeout" // 504: no response headers in time
	ReasonClientCanceled  = "client_canceled"         // 499: the client went away first
	// ReasonClientBodyIncomplete: the request stream ended before its
	// Content-Length; answered with a stream error (RFC 9114 §4.1.2).
	ReasonClientBodyIncomplete = "client_body_incomplete"
	// ReasonClientBodyMalformed: the request's DATA ran past its
	// Content-Length or its trailers were malformed; answered with a stream
	// error (RFC 9114 §4.1.2) and never handed whole to the backend.
	ReasonClientBodyMalformed = "client_body_malformed"
	ReasonInvalidPath         = "invalid_path"         // 400: :path is not an RFC 3986 path and query
	ReasonNoRoute             = "no_route"             // 404
	ReasonNoBackend           = "no_healthy_backend"   // 503
	ReasonPending             = "discovery_pending"    // 503: discovery has not answered yet
	ReasonBodyFailed          = "backend_body_failed"  // stream reset after the response started
	ReasonNotImplemented      = "method_not_supported" // 501
	StatusClientClosed        = 499                    // logged, never sent
)

// ReasonInvalidRequest (400): the client library under the backend's
// transport refused to send the request (a method, field, trailer or
// pseudo-header it will not encode): the client's fault, never the
// backend's, which saw nothing.
const ReasonInvalidRequest = "invalid_request"

// unsendable are the texts of net/http's and x/net/http2's refusals to
// encode a request (none has an exported type): request.go and
// transport.go of net/http, x/net's internal/httpcommon.
var unsendable = []string{
	"net/http: invalid ", "invalid HTTP header ", "invalid HTTP trailer ", "invalid Host header",
	"invalid :protocol header", "invalid request :path", "invalid Trailer key", "invalid Upgrade request header",
	"invalid Transfer-Encoding request header", "invalid Connection request header",
	"request header list larger than peer's advertised limit",
}

// IsUnsendable reports whether err is the backend transport refusing to
// encode the request before sending a byte of it, so that a request the
// ingress let through can never count against a backend's health.
func IsUnsendable(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	for _, u := range unsendable {
		if strings.Contains(s, u) {
			return true
		}
	}
	return false
}

// ReasonInvalidResponse (502): the backend answered with a 101 the request
// did not ask for (the gateway never forwards Upgrade), or with more 1xx
// responses than the gateway relays.
const ReasonInvalidResponse = "backend_invalid_response"

// ErrResponseHeaderTimeout is the cancellation cause the gateway sets when a
// backend does not send response headers within the upstream's
// response_header timeout.
var ErrResponseHeaderTimeout = errors.New("transport: timeout awaiting response headers")

// Classify maps a round-trip error to the status and reason the gateway
// answers with (see interface.md "Responses the gateway itself produces"):
// 504 for the response-header timeout, 499 when the client canceled, and 502
// for connect, TLS and reset failures; 400 for a request the transport
// refused to encode (IsUnsendable). ctx is the request context whose
// cause distinguishes a timeout from a client cancel.
func Classify(ctx context.Context, err error) (status int, reason string) {
	if errors.Is(context.Cause(ctx), ErrResponseHeaderTimeout) || errors.Is(err, ErrResponseHeaderTimeout) || isH1HeaderTimeout(err) {
		return http.StatusGatewayTimeout, ReasonResponseTimeout
	}
	if ctx.Err() != nil {
		return StatusClientClosed, ReasonClientCanceled
	}
	var (
		unknownAuth x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		certInvalid x509.CertificateInvalidError
		verifyErr   *tls.CertificateVerificationError
	)
	if errors.As(err, &unknownAuth) || errors.As(err, &hostErr) || errors.As(err, &certInvalid) || errors.As(err, &verifyErr) {
		return http.StatusBadGateway, ReasonTLS
	}
	var dialErr *DialError
	if errors.As(err, &dialErr) {
		if dialErr.TLS {
			return http.StatusBadGateway, ReasonTLS
		}
		return http.StatusBadGateway, ReasonConnect
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return http.StatusBadGateway, ReasonConnect
	}
	if IsUnsendable(err) {
		return http.StatusBadRequest, ReasonInvalidRequest
	}
	return http.StatusBadGateway, ReasonReset
}

// isH1HeaderTimeout recognises net/http's Transport.ResponseHeaderTimeout
// error, which has no exported type: a timeout whose text says so.
func isH1HeaderTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && strings.Contains(err.Error(), "timeout awaiting response headers")
}

// IsGracefulGoAway reports whether err is x/net/http2's failure of a request
// that an HTTP/2 backend's graceful GOAWAY left unprocessed (a stream above
// its last-stream-id) and that could not be sent again, e.g. a body too long
// to replay. The backend is shutting down as it should (RFC 9113 §6.8): not
// a failure of its health. The error has no exported type; its text is
// stable ("http2: Transport received Server's graceful shutdown GOAWAY").
func IsGracefulGoAway(err error) bool {
	return err != nil && strings.Contains(err.Error(), "graceful shutdown GOAWAY")
}

// IsConnectFailure reports whether err is a failure to connect to the
// backend before any request byte was sent: TCP connect refused or timed
// out, TLS handshake or ALPN (DialError, or net/http's dial error for
// HTTP/1.1 backends). The backend never saw the request.
func IsConnectFailure(err error) bool {
	var dialErr *DialError
	if errors.As(err, &dialErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// IsRefusedStream reports whether err is an HTTP/2 backend's statement
// that it did not process the request: a stream reset with REFUSED_STREAM
// (RFC 9113 §8.7), or a stream above a graceful GOAWAY's last-stream-id
// (IsGracefulGoAway), as x/net/http2 reports them once it did not send the
// request again itself. x/net wraps the stream error in text only ("cannot
// retry err [...]") when the body could not be replayed.
func IsRefusedStream(err error) bool {
	var se http2.StreamError
	if errors.As(err, &se) {
		return se.Code == http2.ErrCodeRefusedStream
	}
	return IsGracefulGoAway(err) || err != nil && strings.Contains(err.Error(), "; REFUSED_STREAM")
}

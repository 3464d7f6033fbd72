package transport

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
)

type timeoutErr struct{ msg string }

func (e timeoutErr) Error() string   { return e.msg }
func (e timeoutErr) Timeout() bool   { return true }
func (e timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	timedOut, cancel2 := context.WithCancelCause(context.Background())
	cancel2(ErrResponseHeaderTimeout)
	bg := context.Background()
	cases := []struct {
		name   string
		ctx    context.Context
		err    error
		status int
		reason string
	}{
		{"header timer fired", timedOut, context.Canceled, 504, ReasonResponseTimeout},
		{"net/http header timeout", bg, timeoutErr{"net/http: timeout awaiting response headers"}, 504, ReasonResponseTimeout},
		{"client went away", canceled, context.Canceled, 499, ReasonClientCanceled},
		{"connect refused", bg, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, 502, ReasonConnect},
		{"h2 dial", bg, &DialError{Err: syscall.ECONNREFUSED}, 502, ReasonConnect},
		{"h2 handshake", bg, &DialError{Err: errors.New("tls: first record does not look like a TLS handshake"), TLS: true}, 502, ReasonTLS},
		{"unknown authority", bg, fmt.Errorf("wrapped: %w", x509.UnknownAuthorityError{}), 502, ReasonTLS},
		{"hostname mismatch", bg, x509.HostnameError{Host: "x"}, 502, ReasonTLS},
		{"reset", bg, &net.OpError{Op: "read", Err: syscall.ECONNRESET}, 502, ReasonReset},
		{"other timeout", bg, timeoutErr{"i/o timeout"}, 502, ReasonReset},
	}
	for _, c := range cases {
		status, reason := Classify(c.ctx, c.err)
		if status != c.status || reason != c.reason {
			t.Errorf("%s: Classify = %d %s, want %d %s", c.name, status, reason, c.status, c.reason)
		}
	}
}

func TestNewRejectsUnknownScheme(t *testing.T) {
	if _, err := New(Options{Scheme: "h2"}); err == nil {
		t.Fatal("New accepted scheme h2")
	}
	for _, s := range []string{SchemeHTTP, SchemeHTTPS, SchemeH2C} {
		rt, err := New(Options{Scheme: s})
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		rt.CloseIdleConnections()
	}
}

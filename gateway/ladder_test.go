package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/quic-go/quic-go/http3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// Tests of the upstream timeout ladder's pipeline part (timeouts.go):
// body_idle (R08) and request (R05), over every ingress protocol and to
// HTTP/1.1 and HTTP/2 backends.

// ejectOnFirstFailure makes one passive-health failure eject a backend, so
// that a test sees whether an outcome blamed it.
var ejectOnFirstFailure = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}

// ejected reports whether the gateway's only backend is ejected.
func ejected(g *Gateway) bool {
	for _, bi := range g.Backends() {
		if bi.Ejected || !bi.Eligible {
			return true
		}
	}
	return false
}

// readAllTimed reads resp's body to its end and says how long that took.
func readAllTimed(resp *http.Response) ([]byte, time.Duration, error) {
	start := time.Now()
	b, err := io.ReadAll(resp.Body)
	return b, time.Since(start), err
}

// checkReset fails unless err is what a client sees of a response the
// gateway cut: over HTTP/3 a stream reset with H3_INTERNAL_ERROR (RFC 9114
// §8.1), over HTTP/2 a stream reset, over HTTP/1.1 the connection closing
// before the body's end; never a clean end.
func checkReset(t *testing.T, ingress string, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("the truncated body ended cleanly; want a reset")
	}
	if ingress == ProtocolH3 {
		var he *http3.Error
		if !errors.As(err, &he) || he.ErrorCode != http3.ErrCodeInternalError {
			t.Errorf("got %v, want a stream reset H3_INTERNAL_ERROR", err)
		}
	}
}

// TestR08StalledResponseBodyIsCut: a backend that sends its headers and
// half the body, then stalls, has the client's stream reset (connection
// closed on HTTP/1.1) after body_idle, and is blamed: with
// consecutive_failures = 1 it is ejected. Both for a body of known length
// and a streamed one.
func TestR08StalledResponseBodyIsCut(t *testing.T) {
	const bodyIdle = 300 * time.Millisecond
	forEachProtocol(t, func(t *testing.T, ingress string) {
		for _, proto := range backendProtocols {
			for _, known := range []bool{true, false} {
				name := proto + "/streamed"
				if known {
					name = proto + "/content-length"
				}
				t.Run(name, func(t *testing.T) {
					stalled := make(chan struct{})
					be := backendOver(t, proto, func(w http.ResponseWriter, r *http.Request) {
						if known {
							w.Header().Set("Content-Length", "2000")
						}
						w.WriteHeader(200)
						w.Write(bytes.Repeat([]byte("x"), 1000))
						w.(http.Flusher).Flush()
						close(stalled)
						<-r.Context().Done() // the gateway gives up first
					})
					uc := staticUpstream("u", "/", be)
					uc.BodyIdleTimeout, uc.Passive = bodyIdle, ejectOnFirstFailure
					h := newHarnessOver(t, ingress, uc)
					start := time.Now() // the stall starts later: the cut must come body_idle after this at least
					resp, err := h.client.Get(h.base + "/")
					if err != nil {
						// HTTP/3 may discard the headers with the reset
						// (RFC 9000 §3.2): still not a clean end.
						checkReset(t, ingress, err)
						return
					}
					defer resp.Body.Close()
					<-stalled
					got, _, err := readAllTimed(resp)
					checkReset(t, ingress, err)
					if took := time.Since(start); took < bodyIdle || took > 5*time.Second {
						t.Errorf("cut %v after the request, want about %v after the stall", took, bodyIdle)
					}
					if len(got) > 1000 {
						t.Errorf("client got %d bytes of the 1000 sent", len(got))
					}
					eventually(t, 5*time.Second, func() bool { return ejected(h.gw) }, "the stalled backend to be ejected")
					if n := requestsCountedOver(h.gw, ingress, "u", "2xx", answer.BodyIdleTimeout.Reason); n != 1 {
						t.Errorf("counted %d requests with reason %s, want 1", n, answer.BodyIdleTimeout.Reason)
					}
				})
			}
		}
	})
}

// TestR08SlowResponseBodyIsNotCut: a backend that writes a byte every
// body_idle/3 for 3 × body_idle is slow, not stalled: the body arrives
// whole and the backend is not blamed. Neither is a response_header
// timeout shorter than the whole body applied to it.
func TestR08SlowResponseBodyIsNotCut(t *testing.T) {
	const bodyIdle = 450 * time.Millisecond
	const pieces = 9
	forEachProtocol(t, func(t *testing.T, ingress string) {
		forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
			be := backendOver(t, proto, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				for range pieces {
					select {
					case <-time.After(bodyIdle / 3):
					case <-r.Context().Done():
						return
					}
					w.Write([]byte("x"))
					w.(http.Flusher).Flush()
				}
			})
			uc := staticUpstream("u", "/", be)
			uc.BodyIdleTimeout, uc.Passive = bodyIdle, ejectOnFirstFailure
			uc.ResponseHeaderTimeout = bodyIdle
			h := newHarnessOver(t, ingress, uc)
			resp := h.get("/")
			defer resp.Body.Close()
			got, took, err := readAllTimed(resp)
			if err != nil || string(got) != strings.Repeat("x", pieces) {
				t.Fatalf("slow body: %q %v", got, err)
			}
			if took < 2*bodyIdle {
				t.Errorf("the body took %v: the test did not trickle", took)
			}
			if ejected(h.gw) {
				t.Error("a slow backend was ejected")
			}
		})
	})
}

// TestR08GRPCStreamIsGovernedByBodyIdle: a gRPC server stream that sends a
// message and then nothing is cut after body_idle (an error, never a clean
// end of the call), while one whose silences stay under it completes
// (B20: only the configured timeout cuts a silence).
func TestR08GRPCStreamIsGovernedByBodyIdle(t *testing.T) {
	for _, scheme := range []string{"https", "h2c"} {
		t.Run(scheme, func(t *testing.T) {
			uc, _ := grpcBackendWith(t, scheme)
			uc.BodyIdleTimeout, uc.Passive = 300*time.Millisecond, ejectOnFirstFailure
			h := newHarness(t, uc)
			cc := grpcConn(t, h)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			// Stream: five messages 200 ms apart, under body_idle.
			cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/pkg.Svc/Stream")
			if err != nil {
				t.Fatal(err)
			}
			in := []byte("go")
			cs.SendMsg(&in)
			cs.CloseSend()
			n := 0
			for {
				var out []byte
				err := cs.RecvMsg(&out)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("after %d messages: %v", n, err)
				}
				n++
			}
			if n != 5 || ejected(h.gw) {
				t.Fatalf("slow stream: %d messages, ejected %v", n, ejected(h.gw))
			}

			// HangAfter: one message, then silence.
			start := time.Now()
			cs, err = cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/pkg.Svc/HangAfter")
			if err != nil {
				t.Fatal(err)
			}
			cs.SendMsg(&in)
			cs.CloseSend()
			var out []byte
			if err := cs.RecvMsg(&out); err != nil || string(out) != "first" {
				t.Fatalf("first message: %q %v", out, err)
			}
			err = cs.RecvMsg(&out)
			if err == nil || err == io.EOF || status.Code(err) == codes.OK {
				t.Fatalf("stalled stream ended with %v, want an error", err)
			}
			if d := time.Since(start); d < 300*time.Millisecond {
				t.Errorf("cut %v after the call started, before body_idle", d)
			}
			eventually(t, 5*time.Second, func() bool { return ejected(h.gw) }, "the stalled backend to be ejected")
		})
	}
}

// TestR08TunnelsIgnoreTheLadder: a WebSocket tunnel silent for longer than
// body_idle and request stays open: tunnels live as long as both sides
// keep them.
func TestR08TunnelsIgnoreTheLadder(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		e := testbackend.NewWSEcho(t)
		uc := wsUpstream(e, nil)
		uc.BodyIdleTimeout, uc.RequestTimeout = 100*time.Millisecond, 200*time.Millisecond
		h := newHarnessOver(t, proto, uc)
		c, err := dialWS(t, h, "/ws/echo", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.close()
		time.Sleep(500 * time.Millisecond) // the silence is the test
		if err := c.send(ws.OpText, []byte("still there")); err != nil {
			t.Fatal(err)
		}
		if msg, _, err := c.recv(); err != nil || string(msg) != "still there" {
			t.Fatalf("after the silence: %q %v", msg, err)
		}
	})
}

// TestR05RequestTimeoutBeforeTheResponse: a backend that never sends its
// headers gets the client a 504 request_timeout once the upstream's
// request timeout passed, though response_header is longer; the backend
// held the request that long and is blamed.
func TestR05RequestTimeoutBeforeTheResponse(t *testing.T) {
	const request = 400 * time.Millisecond
	forEachProtocol(t, func(t *testing.T, ingress string) {
		forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
			be := backendOver(t, proto, func(w http.ResponseWriter, r *http.Request) {
				<-r.Context().Done()
			})
			uc := staticUpstream("u", "/", be)
			uc.RequestTimeout, uc.Passive = request, ejectOnFirstFailure
			uc.ResponseHeaderTimeout = 10 * time.Second
			h := newHarnessOver(t, ingress, uc)
			start := time.Now()
			code, reason, err := h.do("GET", "/", nil, 0, nil)
			took := time.Since(start)
			if err != nil || code != 504 || reason != answer.RequestTimeout.Reason {
				t.Fatalf("%d %q %v, want 504 %s", code, reason, err, answer.RequestTimeout.Reason)
			}
			if took < request-50*time.Millisecond || took > 5*time.Second {
				t.Errorf("answered after %v, want about %v", took, request)
			}
			if n := requestsCountedOver(h.gw, ingress, "u", "5xx", answer.RequestTimeout.Reason); n != 1 {
				t.Errorf("counted %d, want 1", n)
			}
			eventually(t, 5*time.Second, func() bool { return ejected(h.gw) }, "the hanging backend to be ejected")
		})
	})
}

// TestR05RequestTimeoutCutsALongBody: a body that keeps coming (never idle)
// but outlives the request timeout is reset, never ended cleanly; the
// backend is not blamed (the exchange's budget ran out, not its health).
func TestR05RequestTimeoutCutsALongBody(t *testing.T) {
	const request = 500 * time.Millisecond
	forEachProtocol(t, func(t *testing.T, ingress string) {
		forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
			be := backendOver(t, proto, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(200)
				for {
					w.Write([]byte("x"))
					w.(http.Flusher).Flush()
					select {
					case <-time.After(20 * time.Millisecond):
					case <-r.Context().Done():
						return
					}
				}
			})
			uc := staticUpstream("u", "/", be)
			uc.RequestTimeout, uc.BodyIdleTimeout, uc.Passive = request, 10*time.Second, ejectOnFirstFailure
			h := newHarnessOver(t, ingress, uc)
			start := time.Now()
			resp, err := h.client.Get(h.base + "/")
			if err != nil {
				checkReset(t, ingress, err)
				return
			}
			defer resp.Body.Close()
			_, _, err = readAllTimed(resp)
			checkReset(t, ingress, err)
			if took := time.Since(start); took < request-50*time.Millisecond || took > 5*time.Second {
				t.Errorf("cut after %v, want about %v", took, request)
			}
			// Counted with the status the client got, as a body_idle cut.
			eventually(t, 5*time.Second, func() bool { return requestsCountedOver(h.gw, ingress, "u", "2xx", answer.RequestTimeout.Reason) == 1 },
				"the request timeout to be counted")
			if ejected(h.gw) {
				t.Error("a backend streaming past the request timeout was ejected")
			}
		})
	})
}

// TestR05GRPCRequestTimeout: a gRPC call the backend never answers ends
// with DEADLINE_EXCEEDED request_timeout (Trailers-Only); one whose stream
// outlives the request timeout after a whole message ends with trailers
// carrying the same, not a reset.
func TestR05GRPCRequestTimeout(t *testing.T) {
	uc, _ := grpcBackendWith(t, "h2c")
	uc.RequestTimeout = 400 * time.Millisecond
	h := newHarness(t, uc)
	cc := grpcConn(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, method := range []string{"Hang", "HangAfter"} {
		cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/pkg.Svc/"+method)
		if err != nil {
			t.Fatal(err)
		}
		in := []byte("go")
		cs.SendMsg(&in)
		cs.CloseSend()
		var out []byte
		if method == "HangAfter" {
			if err := cs.RecvMsg(&out); err != nil {
				t.Fatalf("%s: first message: %v", method, err)
			}
		}
		err = cs.RecvMsg(&out)
		if s, _ := status.FromError(err); s.Code() != codes.DeadlineExceeded || s.Message() != answer.RequestTimeout.Reason {
			t.Errorf("%s: %v, want DEADLINE_EXCEEDED %s", method, err, answer.RequestTimeout.Reason)
		}
	}
}

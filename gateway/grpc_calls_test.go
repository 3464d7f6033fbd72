package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestI06GRPCCalls: a grpc-go client over the TCP HTTP/2 ingress, and a raw
// HTTP/3 client, reach grpc-go servers over https:// and h2c://: unary,
// server streaming, client streaming and bidirectional streaming, with
// messages arriving one by one in both directions (gRPC over HTTP/2).
func TestI06GRPCCalls(t *testing.T) {
	for _, scheme := range []string{"https", "h2c"} {
		t.Run(scheme, func(t *testing.T) {
			uc, probe := grpcBackendWith(t, scheme)
			h := newHarness(t, uc)
			t.Run("grpc-go over h2", func(t *testing.T) { testGRPCGoCalls(t, grpcConn(t, h), probe) })
			t.Run("raw h3", func(t *testing.T) { testRawGRPCCalls(t, h.client, h.base, probe) })
		})
	}
}

func testGRPCGoCalls(t *testing.T, cc *grpc.ClientConn, probe *grpcProbe) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t.Run("unary", func(t *testing.T) {
		in, out := []byte("hi"), []byte(nil)
		if err := cc.Invoke(ctx, "/pkg.Svc/Unary", &in, &out); err != nil || string(out) != "echo:hi" {
			t.Fatalf("%q %v", out, err)
		}
	})
	t.Run("server streaming", func(t *testing.T) {
		cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/pkg.Svc/Stream")
		if err != nil {
			t.Fatal(err)
		}
		in := []byte("go")
		if err := cs.SendMsg(&in); err != nil {
			t.Fatal(err)
		}
		cs.CloseSend()
		var at []time.Time
		for i := 0; ; i++ {
			var out []byte
			err := cs.RecvMsg(&out)
			if err == io.EOF {
				break
			}
			if err != nil || string(out) != fmt.Sprintf("msg%d", i) {
				t.Fatalf("message %d: %q %v", i, out, err)
			}
			at = append(at, time.Now())
		}
		checkOneByOne(t, at)
	})
	t.Run("client streaming", func(t *testing.T) {
		drain(probe.received)
		cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/pkg.Svc/Collect")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []string{"a", "b", "c"} {
			in := []byte(m)
			if err := cs.SendMsg(&in); err != nil {
				t.Fatal(err)
			}
			// The next message goes only once the backend got this one.
			if got := waitFor(t, probe.received, "message "+m+" at the backend"); got != m {
				t.Fatalf("backend got %q, want %q", got, m)
			}
		}
		cs.CloseSend()
		var out []byte
		if err := cs.RecvMsg(&out); err != nil || string(out) != "got:a,b,c" {
			t.Fatalf("%q %v", out, err)
		}
		if err := cs.RecvMsg(&out); err != io.EOF {
			t.Fatalf("after the answer: %v", err)
		}
	})
	t.Run("bidirectional", func(t *testing.T) {
		cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/pkg.Svc/Chat")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			// Each message is sent only after the previous echo came
			// back: held back in either direction, the call would stall.
			in := []byte(fmt.Sprintf("m%d", i))
			if err := cs.SendMsg(&in); err != nil {
				t.Fatal(err)
			}
			var out []byte
			if err := cs.RecvMsg(&out); err != nil || string(out) != "echo:"+string(in) {
				t.Fatalf("echo %d: %q %v", i, out, err)
			}
		}
		cs.CloseSend()
		var out []byte
		if err := cs.RecvMsg(&out); err != io.EOF {
			t.Fatalf("end of the call: %v", err)
		}
	})
}

func testRawGRPCCalls(t *testing.T, client *http.Client, base string, probe *grpcProbe) {
	wantOK := func(t *testing.T, c *rawGRPC) {
		t.Helper()
		if m, err := c.recv(); err != io.EOF {
			t.Fatalf("after the last message: %q %v", m, err)
		}
		if st, msg := c.status(); st != "0" {
			t.Fatalf("grpc-status %q (%q), want 0", st, msg)
		}
	}
	t.Run("unary", func(t *testing.T) {
		c := startRawGRPC(t, client, base, "/pkg.Svc/Unary")
		c.send("hi")
		c.closeSend()
		if resp := c.response(); resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/grpc" {
			t.Fatalf("%d %v", resp.StatusCode, resp.Header)
		}
		if m, err := c.recv(); err != nil || m != "echo:hi" {
			t.Fatalf("%q %v", m, err)
		}
		wantOK(t, c)
	})
	t.Run("server streaming", func(t *testing.T) {
		c := startRawGRPC(t, client, base, "/pkg.Svc/Stream")
		c.send("go")
		c.closeSend()
		var at []time.Time
		for i := range 5 {
			if m, err := c.recv(); err != nil || m != fmt.Sprintf("msg%d", i) {
				t.Fatalf("message %d: %q %v", i, m, err)
			}
			at = append(at, time.Now())
		}
		checkOneByOne(t, at)
		wantOK(t, c)
	})
	t.Run("client streaming", func(t *testing.T) {
		drain(probe.received)
		c := startRawGRPC(t, client, base, "/pkg.Svc/Collect")
		for _, m := range []string{"a", "b", "c"} {
			c.send(m)
			if got := waitFor(t, probe.received, "message "+m+" at the backend"); got != m {
				t.Fatalf("backend got %q, want %q", got, m)
			}
		}
		c.closeSend()
		if m, err := c.recv(); err != nil || m != "got:a,b,c" {
			t.Fatalf("%q %v", m, err)
		}
		wantOK(t, c)
	})
	t.Run("bidirectional", func(t *testing.T) {
		c := startRawGRPC(t, client, base, "/pkg.Svc/Chat")
		for i := range 5 {
			m := fmt.Sprintf("m%d", i)
			c.send(m)
			if got, err := c.recv(); err != nil || got != "echo:"+m {
				t.Fatalf("echo %d: %q %v", i, got, err)
			}
		}
		c.closeSend()
		wantOK(t, c)
	})
}

// checkOneByOne: the Stream method's messages, sent 200 ms apart, arrived
// apart, not held back and batched.
func checkOneByOne(t *testing.T, at []time.Time) {
	t.Helper()
	if len(at) != 5 {
		t.Fatalf("%d messages, want 5", len(at))
	}
	for i := 1; i < len(at); i++ {
		if gap := at[i].Sub(at[i-1]); gap < 100*time.Millisecond {
			t.Errorf("message %d arrived %v after the previous one: held back and batched", i, gap)
		}
	}
}

// TestI06GRPCDeadline: grpc-timeout bounds the call at the gateway. A
// backend that hangs (ignoring its own deadline) before its response
// headers gets the client a Trailers-Only DEADLINE_EXCEEDED; one that hangs
// after a first message gets the message, then trailers with
// DEADLINE_EXCEEDED (no reset), over HTTP/2 and HTTP/3. grpc-timeout still
// reaches the backend; a malformed one is answered INTERNAL.
func TestI06GRPCDeadline(t *testing.T) {
	for _, scheme := range []string{"https", "h2c"} {
		t.Run(scheme, func(t *testing.T) {
			uc, probe := grpcBackendWith(t, scheme)
			h := newHarness(t, uc)
			clients := map[string]*http.Client{"h2": h2Client(h), "h3": h.client}
			for _, proto := range streamProtocols {
				client := clients[proto]
				t.Run(proto+"/before headers", func(t *testing.T) {
					drain(probe.started)
					c := startRawGRPC(t, client, h.base, "/pkg.Svc/Hang", "Grpc-Timeout", "300m")
					c.send("x")
					c.closeSend()
					if a := waitFor(t, probe.started, "the call at the backend"); a.method != "Hang" || !a.hasDeadline {
						t.Errorf("backend got %+v, want Hang with the deadline of grpc-timeout", a)
					}
					resp := c.response()
					elapsed := time.Since(c.start)
					if st, msg := c.status(); resp.StatusCode != 200 || st != "4" || msg != answer.GRPCTimeout.Reason {
						t.Fatalf("%d grpc-status %q %q, want 200 Trailers-Only DEADLINE_EXCEEDED %s", resp.StatusCode, st, msg, answer.GRPCTimeout.Reason)
					}
					if elapsed < 300*time.Millisecond || elapsed > 5*time.Second {
						t.Errorf("answered after %v, want the 300ms deadline", elapsed)
					}
					if m, err := c.recv(); err != io.EOF {
						t.Errorf("Trailers-Only answer has a body: %q %v", m, err)
					}
				})
				t.Run(proto+"/after headers", func(t *testing.T) {
					drain(probe.started)
					c := startRawGRPC(t, client, h.base, "/pkg.Svc/HangAfter", "Grpc-Timeout", "300000u")
					c.send("x")
					c.closeSend()
					if m, err := c.recv(); err != nil || m != "first" {
						t.Fatalf("first message: %q %v", m, err)
					}
					if m, err := c.recv(); err != io.EOF {
						t.Fatalf("after the first message: %q %v, want the end of the stream (trailers, no reset)", m, err)
					}
					elapsed := time.Since(c.start)
					if st, msg := c.status(); st != "4" || msg != answer.GRPCTimeout.Reason {
						t.Fatalf("trailers grpc-status %q %q, want DEADLINE_EXCEEDED %s", st, msg, answer.GRPCTimeout.Reason)
					}
					if elapsed < 300*time.Millisecond || elapsed > 5*time.Second {
						t.Errorf("ended after %v, want the 300ms deadline", elapsed)
					}
					if a := waitFor(t, probe.started, "the call at the backend"); a.method != "HangAfter" || !a.hasDeadline {
						t.Errorf("backend got %+v", a)
					}
				})
				t.Run(proto+"/malformed", func(t *testing.T) {
					for _, v := range []string{"123456789S", "1x", "-1S", "S"} {
						c := startRawGRPC(t, client, h.base, "/pkg.Svc/Unary", "Grpc-Timeout", v)
						c.send("x")
						c.closeSend()
						if st, msg := c.status(); st != "13" || msg != answer.GRPCTimeoutInvalid.Reason {
							t.Errorf("grpc-timeout %q: grpc-status %q %q, want INTERNAL %s", v, st, msg, answer.GRPCTimeoutInvalid.Reason)
						}
					}
				})
			}
			t.Run("grpc-go", func(t *testing.T) {
				drain(probe.started)
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				in, out := []byte("x"), []byte(nil)
				err := grpcConn(t, h).Invoke(ctx, "/pkg.Svc/Hang", &in, &out)
				if status.Code(err) != codes.DeadlineExceeded {
					t.Fatalf("%v, want DEADLINE_EXCEEDED", err)
				}
				if a := waitFor(t, probe.started, "the call at the backend"); !a.hasDeadline {
					t.Error("the deadline did not reach the backend")
				}
			})
		})
	}
}

// TestI06GRPCCancel: a call the client cancels is cancelled at the backend:
// the grpc-go server's handler sees its context done, for a grpc-go client
// over HTTP/2 and for a raw HTTP/3 client resetting its stream (both
// directions, or only its request side).
func TestI06GRPCCancel(t *testing.T) {
	for _, scheme := range []string{"https", "h2c"} {
		t.Run(scheme, func(t *testing.T) {
			uc, probe := grpcBackendWith(t, scheme)
			h := newHarness(t, uc)
			backendCanceled := func(t *testing.T) {
				t.Helper()
				defer drain(probe.done)
				if err := waitFor(t, probe.done, "the backend's context to end"); !errors.Is(err, context.Canceled) {
					t.Errorf("backend context ended with %v, want canceled", err)
				}
			}
			t.Run("grpc-go over h2", func(t *testing.T) {
				drain(probe.started)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				cs, err := grpcConn(t, h).NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/pkg.Svc/Wait")
				if err != nil {
					t.Fatal(err)
				}
				in := []byte("x")
				if err := cs.SendMsg(&in); err != nil {
					t.Fatal(err)
				}
				waitFor(t, probe.started, "the call at the backend")
				cancel()
				backendCanceled(t)
				var out []byte
				if err := cs.RecvMsg(&out); status.Code(err) != codes.Canceled {
					t.Errorf("client: %v", err)
				}
			})
			for _, c := range []struct {
				name string
				both bool
			}{{"raw h3 reset", true}, {"raw h3 reset of the request side", false}} {
				t.Run(c.name, func(t *testing.T) {
					drain(probe.started)
					str, err := dialRaw(t, h).OpenStreamSync(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					str.Write(headersFrame(reqFields("POST", "/pkg.Svc/Wait",
						qpack.HeaderField{Name: "content-type", Value: "application/grpc"},
						qpack.HeaderField{Name: "te", Value: "trailers"})...))
					str.Write(dataFrame(grpcMessage("x")))
					waitFor(t, probe.started, "the call at the backend")
					str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestCanceled))
					if c.both {
						str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestCanceled))
					}
					backendCanceled(t)
				})
			}
		})
	}
}

// TestI06GRPCMessageTooLarge: a gRPC message beyond max_request_body_bytes
// is refused with RESOURCE_EXHAUSTED: Trailers-Only before the backend
// answered, trailers (not a reset) once its response started.
func TestI06GRPCMessageTooLarge(t *testing.T) {
	big := strings.Repeat("x", 4096)
	for _, scheme := range []string{"https", "h2c"} {
		t.Run(scheme, func(t *testing.T) {
			uc, _ := grpcBackendWith(t, scheme)
			h := startHarness(t, ListenerConfig{Limits: Limits{MaxRequestBodyBytes: 1024}}, ProtocolH3, uc)
			cc := grpcConn(t, h)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			wantExhausted := func(t *testing.T, err error) {
				t.Helper()
				if s, _ := status.FromError(err); s.Code() != codes.ResourceExhausted || s.Message() != answer.BodyTooLarge.Reason {
					t.Fatalf("%v, want RESOURCE_EXHAUSTED %s", err, answer.BodyTooLarge.Reason)
				}
			}
			t.Run("unary", func(t *testing.T) {
				in, out := []byte(big), []byte(nil)
				wantExhausted(t, cc.Invoke(ctx, "/pkg.Svc/Unary", &in, &out))
				in = []byte("small")
				if err := cc.Invoke(ctx, "/pkg.Svc/Unary", &in, &out); err != nil {
					t.Fatalf("a small message after it: %v", err)
				}
			})
			t.Run("mid-stream", func(t *testing.T) {
				cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/pkg.Svc/Chat")
				if err != nil {
					t.Fatal(err)
				}
				in, out := []byte("a"), []byte(nil)
				if err := cs.SendMsg(&in); err != nil {
					t.Fatal(err)
				}
				if err := cs.RecvMsg(&out); err != nil || string(out) != "echo:a" {
					t.Fatalf("%q %v", out, err)
				}
				in = []byte(big)
				_ = cs.SendMsg(&in) // io.EOF once the gateway ended the call
				err = cs.RecvMsg(&out)
				wantExhausted(t, err)
			})
			t.Run("raw h3 mid-stream", func(t *testing.T) {
				c := startRawGRPC(t, h.client, h.base, "/pkg.Svc/Chat")
				c.send("a")
				if m, err := c.recv(); err != nil || m != "echo:a" {
					t.Fatalf("%q %v", m, err)
				}
				go c.send(big) // the transport may stop taking it
				if m, err := c.recv(); err != io.EOF {
					t.Fatalf("%q %v, want the end of the stream (trailers, no reset)", m, err)
				}
				if st, msg := c.status(); st != "8" || msg != answer.BodyTooLarge.Reason {
					t.Fatalf("trailers grpc-status %q %q, want RESOURCE_EXHAUSTED %s", st, msg, answer.BodyTooLarge.Reason)
				}
			})
		})
	}
}

// TestI06GRPCIdleStream: client_body_timeout applies to a gRPC stream whose
// client sends nothing more: once the backend answered, the call ends with
// trailers DEADLINE_EXCEEDED client_body_timeout, not a reset.
func TestI06GRPCIdleStream(t *testing.T) {
	uc, _ := grpcBackendWith(t, "h2c")
	h := startHarness(t, ListenerConfig{Limits: Limits{ClientBodyTimeout: 300 * time.Millisecond}}, ProtocolH3, uc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cs, err := grpcConn(t, h).NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/pkg.Svc/Chat")
	if err != nil {
		t.Fatal(err)
	}
	in, out := []byte("a"), []byte(nil)
	if err := cs.SendMsg(&in); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(&out); err != nil || string(out) != "echo:a" {
		t.Fatalf("%q %v", out, err)
	}
	start := time.Now()
	err = cs.RecvMsg(&out) // the client stays silent
	if s, _ := status.FromError(err); s.Code() != codes.DeadlineExceeded || s.Message() != answer.ClientBodyTimeout.Reason {
		t.Fatalf("%v, want DEADLINE_EXCEEDED %s", err, answer.ClientBodyTimeout.Reason)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("ended after %v, before client_body_timeout", d)
	}
}

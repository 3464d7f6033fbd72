package gateway

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// rawCodec passes gRPC messages as bytes, so the test service needs no
// generated code.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if b, ok := v.(*[]byte); ok {
		return *b, nil
	}
	return nil, fmt.Errorf("rawCodec: %T", v)
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*b = append([]byte(nil), data...)
	return nil
}

func (rawCodec) Name() string { return "raw" }

// grpcBackend is a real grpc-go server over HTTP/2 with TLS serving
// pkg.Svc: Unary (echo), TrailersOnly (an error before any message),
// Fail (one message, then an error), Stream (five messages 200 ms apart).
// (grpc-go drops "te" before a handler sees it: TestB11 checks that it
// reaches HTTP/2 backends.)
func grpcBackend(t *testing.T) UpstreamConfig { return grpcBackendOver(t, "https") }

// grpcBackendOver is grpcBackend reached by scheme: "https" (TLS) or "h2c"
// (grpc-go's cleartext HTTP/2 with prior knowledge, insecure credentials).
func grpcBackendOver(t *testing.T, scheme string) UpstreamConfig {
	t.Helper()
	uc, _ := grpcBackendWith(t, scheme)
	return uc
}

// grpcProbe observes the calls of grpcBackendWith's server. Its channels are
// buffered and never block a handler (a full one drops the event).
type grpcProbe struct {
	received chan string      // Collect, Chat: each message as it arrives
	started  chan grpcArrival // Hang, HangAfter, Wait: the call arrived
	done     chan error       // Wait: the call's context ended, with its error
}

// grpcArrival is a call as the backend's handler got it.
type grpcArrival struct {
	method      string
	hasDeadline bool // grpc-timeout reached the backend (grpc-go turns it into the context's deadline)
}

func notify[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}

// grpcBackendWith is grpcBackendOver with more of pkg.Svc, observed by the
// returned probe: Collect (client streaming: "got:" and the messages joined
// by commas once the client is done), Chat (bidirectional: "echo:" and each
// message as it arrives), Hang (takes a message and never answers, ignoring
// its context, until the test ends), HangAfter (takes a message, sends
// "first", then hangs as Hang) and Wait (takes a message and waits for its
// context to end).
func grpcBackendWith(t *testing.T, scheme string) (UpstreamConfig, *grpcProbe) {
	t.Helper()
	probe := &grpcProbe{received: make(chan string, 64), started: make(chan grpcArrival, 64), done: make(chan error, 64)}
	release := make(chan struct{})
	arrived := func(method string, ss grpc.ServerStream) error {
		var in []byte
		if err := ss.RecvMsg(&in); err != nil {
			return err
		}
		_, ok := ss.Context().Deadline()
		notify(probe.started, grpcArrival{method, ok})
		return nil
	}
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	desc := grpc.ServiceDesc{
		ServiceName: "pkg.Svc",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			{MethodName: "Unary", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				if err := dec(&in); err != nil {
					return nil, err
				}
				out := append([]byte("echo:"), in...)
				return &out, nil
			}},
			{MethodName: "TrailersOnly", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in []byte
				dec(&in)
				return nil, status.Error(codes.NotFound, "no such thing")
			}},
		},
		Streams: []grpc.StreamDesc{
			{StreamName: "Fail", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				var in []byte
				if err := ss.RecvMsg(&in); err != nil {
					return err
				}
				out := []byte("partial")
				if err := ss.SendMsg(&out); err != nil {
					return err
				}
				return status.Error(codes.InvalidArgument, "bad thing")
			}},
			{StreamName: "Collect", ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				var got []string
				for {
					var in []byte
					err := ss.RecvMsg(&in)
					if err == io.EOF {
						out := []byte("got:" + strings.Join(got, ","))
						return ss.SendMsg(&out)
					}
					if err != nil {
						return err
					}
					got = append(got, string(in))
					notify(probe.received, string(in))
				}
			}},
			{StreamName: "Chat", ServerStreams: true, ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				for {
					var in []byte
					err := ss.RecvMsg(&in)
					if err == io.EOF {
						return nil
					}
					if err != nil {
						return err
					}
					notify(probe.received, string(in))
					out := append([]byte("echo:"), in...)
					if err := ss.SendMsg(&out); err != nil {
						return err
					}
				}
			}},
			{StreamName: "Hang", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				if err := arrived("Hang", ss); err != nil {
					return err
				}
				<-release
				return nil
			}},
			{StreamName: "HangAfter", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				var in []byte
				if err := ss.RecvMsg(&in); err != nil {
					return err
				}
				out := []byte("first")
				if err := ss.SendMsg(&out); err != nil {
					return err
				}
				_, ok := ss.Context().Deadline()
				notify(probe.started, grpcArrival{"HangAfter", ok})
				<-release
				return nil
			}},
			{StreamName: "Wait", ServerStreams: true, ClientStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				if err := arrived("Wait", ss); err != nil {
					return err
				}
				<-ss.Context().Done()
				notify(probe.done, ss.Context().Err())
				return ss.Context().Err()
			}},
			{StreamName: "Stream", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
				var in []byte
				if err := ss.RecvMsg(&in); err != nil {
					return err
				}
				for i := range 5 {
					if i > 0 {
						time.Sleep(200 * time.Millisecond)
					}
					out := []byte(fmt.Sprintf("msg%d", i))
					if err := ss.SendMsg(&out); err != nil {
						return err
					}
				}
				return nil
			}},
		},
	}
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert.TLS}})
	if scheme == "h2c" {
		creds = insecure.NewCredentials()
	}
	srv := grpc.NewServer(grpc.Creds(creds), grpc.ForceServerCodec(rawCodec{}))
	srv.RegisterService(&desc, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	t.Cleanup(func() { close(release) }) // first: hanging handlers return
	return UpstreamConfig{
		Config: upstream.Config{Name: "grpc", ResponseHeaderTimeout: 5 * time.Second, TLS: &tls.Config{RootCAs: cert.Pool}},
		Routes: []RouteConfig{{PathPrefix: "/"}},
		Static: []upstream.Spec{{ID: "0", Scheme: scheme, Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port, Weight: 1}},
	}, probe
}

// grpcMessage is one length-prefixed, uncompressed gRPC message.
func grpcMessage(s string) string {
	var p [5]byte
	binary.BigEndian.PutUint32(p[1:], uint32(len(s)))
	return string(p[:]) + s
}

// TestB19GRPC: gRPC through the gateway to a real grpc-go server over
// https:// and over h2c://, with a raw HTTP/3 client: the backend gets
// "te: trailers"; trailers arrive as a trailing HEADERS frame; Trailers-Only arrives as one HEADERS + FIN;
// streamed messages arrive one by one (gRPC over HTTP/2; RFC 9114 §4.1).
func TestB19GRPC(t *testing.T) {
	for _, scheme := range []string{"https", "h2c"} {
		t.Run(scheme, func(t *testing.T) { testB19GRPC(t, grpcBackendOver(t, scheme)) })
	}
}

func testB19GRPC(t *testing.T, uc UpstreamConfig) {
	h := newHarness(t, uc)
	conn := dialRaw(t, h)
	call := func(method, msg string) ([]h3Frame, []time.Time, error) {
		str, err := conn.OpenStreamSync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		str.Write(headersFrame(reqFields("POST", "/pkg.Svc/"+method,
			qpack.HeaderField{Name: "content-type", Value: "application/grpc"},
			qpack.HeaderField{Name: "te", Value: "trailers"})...))
		str.Write(dataFrame(grpcMessage(msg)))
		str.Close()
		str.SetReadDeadline(time.Now().Add(10 * time.Second))
		var frames []h3Frame
		var at []time.Time
		for {
			f, err := readOneFrame(str)
			if err == io.EOF {
				return frames, at, nil
			}
			if err != nil {
				return frames, at, err
			}
			frames = append(frames, f)
			at = append(at, time.Now())
		}
	}
	kinds := func(frames []h3Frame) string {
		var s []string
		for _, f := range frames {
			s = append(s, map[uint64]string{0: "DATA", 1: "HEADERS"}[f.typ])
		}
		return strings.Join(s, ",")
	}

	t.Run("unary OK", func(t *testing.T) {
		frames, _, err := call("Unary", "hi")
		if err != nil || kinds(frames) != "HEADERS,DATA,HEADERS" {
			t.Fatalf("frames %s (%v), want HEADERS,DATA,HEADERS", kinds(frames), err)
		}
		if s, _ := frames[0].field(":status"); s != "200" {
			t.Fatalf(":status %q", s)
		}
		if string(frames[1].payload) != grpcMessage("echo:hi") {
			t.Errorf("message %q", frames[1].payload)
		}
		if s, ok := frames[2].field("grpc-status"); !ok || s != "0" {
			t.Errorf("trailers %v, want grpc-status 0", frames[2].fields)
		}
	})
	t.Run("error trailers", func(t *testing.T) {
		frames, _, err := call("Fail", "hi")
		if err != nil || kinds(frames) != "HEADERS,DATA,HEADERS" {
			t.Fatalf("frames %s (%v), want HEADERS,DATA,HEADERS", kinds(frames), err)
		}
		st, _ := frames[2].field("grpc-status")
		msg, _ := frames[2].field("grpc-message")
		if st != fmt.Sprint(int(codes.InvalidArgument)) || msg != "bad thing" {
			t.Errorf("trailers %v, want grpc-status 3, grpc-message \"bad thing\"", frames[2].fields)
		}
	})
	t.Run("Trailers-Only", func(t *testing.T) {
		frames, _, err := call("TrailersOnly", "hi")
		if err != nil || kinds(frames) != "HEADERS" {
			t.Fatalf("frames %s (%v), want one HEADERS and FIN", kinds(frames), err)
		}
		st, _ := frames[0].field("grpc-status")
		msg, _ := frames[0].field("grpc-message")
		if st != fmt.Sprint(int(codes.NotFound)) || msg != "no such thing" {
			t.Errorf("fields %v, want grpc-status 5, grpc-message \"no such thing\"", frames[0].fields)
		}
	})
	t.Run("server streaming", func(t *testing.T) {
		frames, at, err := call("Stream", "go")
		if err != nil || len(frames) < 7 || frames[0].typ != 1 || frames[len(frames)-1].typ != 1 {
			t.Fatalf("frames %s (%v)", kinds(frames), err)
		}
		// The backend sends a message every 200 ms: each must have been
		// flushed on its own (one per DATA frame), and they must not all
		// have been held back to the end. (Gaps between two arrivals are
		// not asserted: a loaded machine delays one and the next follows
		// closely, which is not batching.)
		var msgs []string
		var times []time.Time
		for i, f := range frames[1 : len(frames)-1] {
			if f.typ != 0 {
				t.Fatalf("frame %d is not DATA", i+1)
			}
			n := 0
			for p := f.payload; len(p) >= 5; n++ {
				l := binary.BigEndian.Uint32(p[1:5])
				msgs = append(msgs, string(p[5:5+l]))
				times = append(times, at[i+1])
				p = p[5+l:]
			}
			if n > 1 {
				t.Errorf("DATA frame %d holds %d messages: held back and batched", i+1, n)
			}
		}
		if strings.Join(msgs, ",") != "msg0,msg1,msg2,msg3,msg4" {
			t.Fatalf("messages %v", msgs)
		}
		if span := times[len(times)-1].Sub(times[0]); span < 400*time.Millisecond {
			t.Errorf("the messages, sent over 800 ms, arrived within %v: held back", span)
		}
		if st, _ := frames[len(frames)-1].field("grpc-status"); st != "0" {
			t.Errorf("trailers %v", frames[len(frames)-1].fields)
		}
	})
}

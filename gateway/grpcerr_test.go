package gateway

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestI06GatewayAnswersGRPC: a grpc-go client over the TCP HTTP/2 ingress
// reaches a grpc-go backend (https and h2c), and when the gateway itself
// answers (no route, no backend, a backend timeout) the client gets a gRPC
// status in a Trailers-Only response, never "unexpected content-type".
func TestI06GatewayAnswersGRPC(t *testing.T) {
	hang := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // net/http notices a closed connection only once the body is read
		<-r.Context().Done()
	}))
	slow := staticUpstream("slow", "/slow.Svc/", hang)
	slow.ResponseHeaderTimeout = 100 * time.Millisecond
	for _, scheme := range []string{"https", "h2c"} {
		t.Run(scheme, func(t *testing.T) {
			grpcUp := grpcBackendOver(t, scheme)
			grpcUp.Routes = []RouteConfig{{PathPrefix: "/pkg.Svc/"}}
			empty := UpstreamConfig{Config: upstream.Config{Name: "empty"}, Routes: []RouteConfig{{PathPrefix: "/empty.Svc/"}}}
			h := newHarnessOver(t, ProtocolH2, grpcUp, empty, slow)
			cc, err := grpc.NewClient(h.base[len("https://"):],
				grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"})),
				grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			in, out := []byte("hi"), []byte(nil)
			if err := cc.Invoke(ctx, "/pkg.Svc/Unary", &in, &out); err != nil || string(out) != "echo:hi" {
				t.Fatalf("unary through the gateway: %q %v", out, err)
			}
			for _, c := range []struct {
				method string
				code   codes.Code
				msg    string
			}{
				{"/other.Svc/Call", codes.Unimplemented, "no_route"},
				{"/empty.Svc/Call", codes.Unavailable, "no_healthy_backend"},
				{"/slow.Svc/Call", codes.DeadlineExceeded, "response_header_timeout"},
			} {
				err := cc.Invoke(ctx, c.method, &in, &out)
				if s, _ := status.FromError(err); s.Code() != c.code || s.Message() != c.msg {
					t.Errorf("%s: %v, want %v %q", c.method, err, c.code, c.msg)
				}
			}
		})
	}
}

package gateway

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// grpcHealthBackend starts a grpc-go server over scheme ("https" with
// cert, or "h2c") that answers /pkg.Svc/Unary with name and, unless hs is
// nil, registers hs as its grpc.health.v1.Health service.
func grpcHealthBackend(t *testing.T, scheme string, cert *selfsigned.Cert, name string, hs *grpchealth.Server) upstream.Spec {
	t.Helper()
	desc := grpc.ServiceDesc{
		ServiceName: "pkg.Svc",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Unary", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			out := []byte(name)
			return &out, nil
		}}},
	}
	creds := insecure.NewCredentials()
	if scheme == "https" {
		creds = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert.TLS}})
	}
	// The health service encodes with proto; pkg.Svc gets raw bytes.
	srv := grpc.NewServer(grpc.Creds(creds), grpc.ForceServerCodec(healthOrRawCodec{}))
	srv.RegisterService(&desc, struct{}{})
	if hs != nil {
		healthpb.RegisterHealthServer(srv, hs)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return upstream.Spec{ID: name, Scheme: scheme, Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port, Weight: 1}
}

// healthOrRawCodec is rawCodec for []byte messages and the proto codec
// for the health service's messages.
type healthOrRawCodec struct{}

func (healthOrRawCodec) Marshal(v any) ([]byte, error) {
	if _, ok := v.(*[]byte); ok {
		return rawCodec{}.Marshal(v)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("healthOrRawCodec: %T", v)
	}
	return proto.Marshal(m)
}

func (healthOrRawCodec) Unmarshal(data []byte, v any) error {
	if _, ok := v.(*[]byte); ok {
		return rawCodec{}.Unmarshal(data, v)
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("healthOrRawCodec: %T", v)
	}
	return proto.Unmarshal(data, m)
}

func (healthOrRawCodec) Name() string { return "proto" }

// grpcCheck is the gRPC active check the tests use: fast, one failure
// makes a backend unhealthy, one pass healthy again, no traffic before the
// first pass.
func grpcCheck(service string) *health.ActiveConfig {
	return &health.ActiveConfig{GRPC: true, GRPCService: service, Interval: 20 * time.Millisecond, Timeout: time.Second,
		HealthyThreshold: 1, UnhealthyThreshold: 1, UnknownIsHealthy: false}
}

// backendHealth returns the /v1/backends view of backend id.
func backendHealth(h *harness, id string) (BackendInfo, bool) {
	for _, bi := range h.gw.Backends() {
		if bi.ID == id {
			return bi, true
		}
	}
	return BackendInfo{}, false
}

// TestGRPCHealthCheck: health_check grpc = true probes
// grpc.health.v1.Health/Check of real grpc-go servers over https:// and
// h2c://: a backend whose health server turns NOT_SERVING is marked
// unhealthy with reason "grpc NOT_SERVING" and gets no more calls from a
// grpc-go client through the gateway; SERVING again brings it back. With
// grpc_service the check asks about that service.
func TestGRPCHealthCheck(t *testing.T) {
	for _, scheme := range []string{"https", "h2c"} {
		for _, service := range []string{"", "pkg.Svc"} {
			t.Run(scheme+"/service="+service, func(t *testing.T) { testGRPCHealthCheck(t, scheme, service) })
		}
	}
}

func testGRPCHealthCheck(t *testing.T, scheme, service string) {
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	hsA, hsB := grpchealth.NewServer(), grpchealth.NewServer()
	for _, hs := range []*grpchealth.Server{hsA, hsB} {
		hs.SetServingStatus("pkg.Svc", healthpb.HealthCheckResponse_SERVING)
	}
	uc := UpstreamConfig{
		Config: upstream.Config{Name: "grpc", ResponseHeaderTimeout: 5 * time.Second, TLS: &tls.Config{RootCAs: cert.Pool},
			Active: grpcCheck(service)},
		Routes: []RouteConfig{{PathPrefix: "/"}},
		Static: []upstream.Spec{grpcHealthBackend(t, scheme, cert, "a", hsA), grpcHealthBackend(t, scheme, cert, "b", hsB)},
	}
	h := newHarnessOver(t, ProtocolH2, uc)
	cc, err := grpc.NewClient(h.base[len("https://"):],
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost"})),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	call := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		in, out := []byte("hi"), []byte(nil)
		if err := cc.Invoke(ctx, "/pkg.Svc/Unary", &in, &out); err != nil {
			t.Fatalf("call through the gateway: %v", err)
		}
		return string(out)
	}
	state := func(id string) (bool, string) {
		bi, _ := backendHealth(h, id)
		return bi.Eligible && bi.Health == "healthy", bi.HealthReason
	}
	eventually(t, 5*time.Second, func() bool { a, _ := state("a"); b, _ := state("b"); return a && b },
		"both backends healthy by their gRPC checks")

	hsA.SetServingStatus(service, healthpb.HealthCheckResponse_NOT_SERVING)
	eventually(t, 5*time.Second, func() bool { ok, reason := state("a"); return !ok && reason == "grpc NOT_SERVING" },
		"backend a unhealthy with reason grpc NOT_SERVING")
	for range 10 {
		if got := call(); got != "b" {
			t.Fatalf("a call reached %q while it is NOT_SERVING", got)
		}
	}

	hsA.SetServingStatus(service, healthpb.HealthCheckResponse_SERVING)
	eventually(t, 5*time.Second, func() bool { ok, _ := state("a"); return ok }, "backend a healthy again")
	seen := map[string]bool{}
	for range 10 {
		seen[call()] = true
	}
	if !seen["a"] || !seen["b"] {
		t.Fatalf("after recovery calls reached %v, want both a and b", seen)
	}
}

// TestGRPCHealthCheckReasons: every way a gRPC check fails gives its own
// reason in /v1/backends: no health service (UNIMPLEMENTED), a service the
// health server does not know (NOT_FOUND), SERVICE_UNKNOWN, a backend that
// is not a gRPC server, a hanging one (timeout), a refused connection, an
// unverifiable certificate and an http:// backend (as a discovered
// instance may be). The check request is a POST with content-type
// application/grpc, te: trailers and grpc-timeout.
func TestGRPCHealthCheckReasons(t *testing.T) {
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	other, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	unknown := grpchealth.NewServer()
	unknown.SetServingStatus("pkg.Svc", healthpb.HealthCheckResponse_SERVICE_UNKNOWN)
	var (
		mu   sync.Mutex
		seen *http.Request
	)
	notGRPC := testbackend.NewH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r
		mu.Unlock()
		w.Write([]byte("hello"))
	}))
	hang := testbackend.NewH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	refused.Close()
	h1 := testbackend.NewH1(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))

	specs := []upstream.Spec{
		grpcHealthBackend(t, "h2c", nil, "no-health-service", nil),
		grpcHealthBackend(t, "https", cert, "not-found", grpchealth.NewServer()), // knows only ""
		grpcHealthBackend(t, "h2c", nil, "service-unknown", unknown),
		grpcHealthBackend(t, "https", other, "bad-cert", grpchealth.NewServer()),
		h2cSpec("not-grpc", notGRPC.Listener.Addr().String()),
		h2cSpec("hang", hang.Listener.Addr().String()),
		h2cSpec("refused", refusedAddr),
		specFor("h1", h1),
	}
	want := map[string]string{
		"no-health-service": "grpc-status UNIMPLEMENTED: unknown service grpc.health.v1.Health",
		"not-found":         "grpc-status NOT_FOUND: unknown service",
		"service-unknown":   "grpc SERVICE_UNKNOWN",
		"bad-cert":          transport.ReasonTLS,
		"not-grpc":          `not a gRPC response (content-type "text/plain; charset=utf-8")`,
		"hang":              "timeout",
		"refused":           transport.ReasonConnect,
		"h1":                upstream.ReasonGRPCNeedsHTTP2,
	}
	active := grpcCheck("pkg.Svc")
	active.Timeout, active.Interval = 200*time.Millisecond, 200*time.Millisecond
	uc := UpstreamConfig{
		Config: upstream.Config{Name: "grpc", ResponseHeaderTimeout: 5 * time.Second, TLS: &tls.Config{RootCAs: cert.Pool},
			Active: active},
		Routes: []RouteConfig{{PathPrefix: "/"}},
		Static: specs,
	}
	h := newHarness(t, uc)
	eventually(t, 10*time.Second, func() bool {
		for id, reason := range want {
			if bi, _ := backendHealth(h, id); bi.Eligible || bi.Health != "unhealthy" || bi.HealthReason != reason {
				return false
			}
		}
		return true
	}, "every backend unhealthy with its reason")
	for id, reason := range want {
		if bi, _ := backendHealth(h, id); bi.HealthReason != reason {
			t.Errorf("%s: reason %q, want %q", id, bi.HealthReason, reason)
		}
	}

	mu.Lock()
	r := seen
	mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/grpc.health.v1.Health/Check" || r.Header.Get("Content-Type") != "application/grpc" ||
		r.Header.Get("Te") != "trailers" || r.Header.Get("Grpc-Timeout") == "" || r.ProtoMajor != 2 {
		t.Errorf("check request: %s %s %s %v", r.Method, r.URL.Path, r.Proto, r.Header)
	}
}

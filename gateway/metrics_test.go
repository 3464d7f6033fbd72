package gateway

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
	"google.golang.org/grpc"
)

// TestI06GRPCMetrics: every gRPC call is counted in impulse_grpc_requests
// with its gRPC status next to the HTTP status class: from the backend's
// trailers or Trailers-Only answer, the gateway's own answers, its
// deadline trailers and a cancelled call; impulse_requests keeps its
// labels.
func TestI06GRPCMetrics(t *testing.T) {
	sink := metrics.NewInmemSink(time.Hour, time.Hour)
	cfg := metrics.DefaultConfig("impulse")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics = false, false
	m, _ := metrics.New(cfg, sink)
	uc, probe := grpcBackendWith(t, "h2c")
	uc.Routes = []RouteConfig{{PathPrefix: "/pkg.Svc/"}}
	h := startHarnessConfig(t, Config{Upstreams: []UpstreamConfig{uc}, Metrics: m}, ListenerConfig{}, ProtocolH3)
	cc := grpcConn(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	in, out := []byte("x"), []byte(nil)
	for _, method := range []string{"Unary", "Unary", "TrailersOnly", "Fail", "/other.Svc/Call"} {
		if !strings.HasPrefix(method, "/") {
			method = "/pkg.Svc/" + method
		}
		_ = cc.Invoke(ctx, method, &in, &out)
	}
	c := startRawGRPC(t, h2Client(h), h.base, "/pkg.Svc/HangAfter", "Grpc-Timeout", "100m")
	c.send("x")
	c.closeSend()
	c.recv()
	c.recv() // the end: DEADLINE_EXCEEDED trailers
	c = startRawGRPC(t, h.client, h.base, "/pkg.Svc/Unary")
	c.send("x")
	c.closeSend()
	c.recv()
	drain(probe.started) // HangAfter's
	cctx, ccancel := context.WithCancel(ctx)
	cs, err := cc.NewStream(cctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/pkg.Svc/Wait")
	if err != nil {
		t.Fatal(err)
	}
	cs.SendMsg(&in)
	waitFor(t, probe.started, "the call at the backend")
	ccancel()
	waitFor(t, probe.done, "the backend's context to end")

	want := []string{
		"h2//4xx/UNIMPLEMENTED=1",
		"h2/grpc/2xx/INVALID_ARGUMENT=1",
		"h2/grpc/2xx/NOT_FOUND=1",
		"h2/grpc/2xx/OK=2",
		"h2/grpc/4xx/CANCELLED=1",
		"h2/grpc/5xx/DEADLINE_EXCEEDED=1",
		"h3/grpc/2xx/OK=1",
	}
	grpcSeries := func() []string {
		h.gw.FlushMetrics()
		var series []string
		for _, iv := range sink.Data() {
			for _, c := range iv.Counters {
				if c.Name != "impulse.grpc.requests" {
					if c.Name == "impulse.requests" {
						for _, l := range c.Labels {
							if l.Name == "grpc_status" {
								t.Errorf("impulse_requests got a grpc_status label: %v", c.Labels)
							}
						}
					}
					continue
				}
				l := map[string]string{}
				for _, lb := range c.Labels {
					l[lb.Name] = lb.Value
				}
				if l["listener"] != "test" {
					t.Errorf("listener label %q", l["listener"])
				}
				series = append(series, fmt.Sprintf("%s/%s/%s/%s=%v", l["protocol"], l["upstream"], l["code"], l["grpc_status"], c.Sum))
			}
		}
		sort.Strings(series)
		return series
	}
	// A handler records once it has answered: the last calls may still be
	// finishing.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := grpcSeries()
		if strings.Join(got, " ") == strings.Join(want, " ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("impulse_grpc_requests series:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

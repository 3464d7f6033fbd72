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

func TestDurationBuckets(t *testing.T) {
	tests := []struct {
		d  time.Duration
		le string
	}{
		{0, "1"},
		{999 * time.Microsecond, "1"},
		{time.Millisecond, "1"}, // le: upper bounds are inclusive
		{time.Millisecond + time.Microsecond, "2.5"},
		{7 * time.Millisecond, "10"},
		{10 * time.Second, "10000"},
		{11 * time.Second, "+Inf"},
		{-time.Millisecond, "1"}, // a clock step never panics
	}
	for _, tt := range tests {
		gm := newGatewayMetrics(nil)
		gm.request("l", "h3", "u", 200, "", tt.d)
		v, _ := gm.requests.Load(requestKey{"l", "h3", "u", "2xx", ""})
		rc := v.(*requestCount)
		got := ""
		for i := range rc.buckets {
			if rc.buckets[i].Load() == 1 {
				got = durationLabels[i]
			}
		}
		if got != tt.le {
			t.Errorf("%v: bucket le=%q, want %q", tt.d, got, tt.le)
		}
		if want := uint64(max(tt.d.Microseconds(), 0)); rc.sumUs.Load() != want {
			t.Errorf("%v: sum %d µs, want %d", tt.d, rc.sumUs.Load(), want)
		}
	}
}

// TestIdleSeriesStayAlive: series of an upstream without traffic are
// re-emitted every touchEvery so go-metrics' retention does not drop them;
// those of a removed upstream are left to expire, then forgotten.
func TestIdleSeriesStayAlive(t *testing.T) {
	sink := metrics.NewInmemSink(time.Hour, time.Hour)
	cfg := metrics.DefaultConfig("impulse")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics = false, false
	m, _ := metrics.New(cfg, sink)
	gm := newGatewayMetrics(m)
	alive := map[string]bool{"a": true, "gone": true}
	live := func(u string) bool { return alive[u] }
	emitted := func() map[string]int {
		out := map[string]int{}
		for _, iv := range sink.Data() {
			for _, c := range iv.Counters {
				for _, l := range c.Labels {
					if l.Name == "upstream" {
						out[c.Name+"/"+l.Value] = c.Count
					}
				}
			}
		}
		return out
	}
	gm.request("l", "h3", "a", 200, "", time.Millisecond)
	gm.request("l", "h3", "gone", 200, "", time.Millisecond)
	t0 := time.Now()
	gm.flush(t0, live)
	before := emitted()
	if before["impulse.requests/a"] != 1 || before["impulse.request.duration.count/gone"] != 1 {
		t.Fatalf("first flush emitted %v", before)
	}
	delete(alive, "gone")
	gm.flush(t0.Add(time.Second), live) // nothing new, too soon to touch
	if got := emitted(); got["impulse.requests/a"] != 1 {
		t.Fatalf("an idle series was touched before touchEvery: %v", got)
	}
	gm.flush(t0.Add(touchEvery+time.Second), live)
	got := emitted()
	if got["impulse.requests/a"] != 2 || got["impulse.request.duration.count/a"] != 2 {
		t.Errorf("idle series of a live upstream not touched: %v", got)
	}
	if got["impulse.requests/gone"] != 1 {
		t.Errorf("series of a removed upstream touched: %v", got)
	}
	gm.flush(t0.Add(forgetAfter+2*time.Second), live)
	if _, ok := gm.requests.Load(requestKey{"l", "h3", "gone", "2xx", ""}); ok {
		t.Error("entry of a removed upstream kept after forgetAfter")
	}
	if _, ok := gm.requests.Load(requestKey{"l", "h3", "a", "2xx", ""}); !ok {
		t.Error("entry of a live upstream forgotten")
	}
}

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

package agent

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
)

// statsdServer is a statsd daemon stand-in: a UDP socket on a free port
// that keeps every line it receives.
type statsdServer struct {
	conn  net.PacketConn
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func newStatsdServer(t *testing.T) *statsdServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &statsdServer{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 65536)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			s.lines = append(s.lines, strings.Split(strings.TrimRight(string(buf[:n]), "\n"), "\n")...)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-s.done })
	return s
}

func (s *statsdServer) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// waitLine waits up to 10 s for a line starting with prefix and returns it.
func (s *statsdServer) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		for _, l := range s.lines {
			if strings.HasPrefix(l, prefix) {
				s.mu.Unlock()
				return l
			}
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no statsd line starting %q in 10s; got:\n%s", prefix, s.all())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// statsdLine is the plain statsd line format go-metrics writes: a dotted
// name without ':', '|' or whitespace and no empty element, a value with
// six decimals, a type.
var statsdLine = regexp.MustCompile(`^[^.:|\s]+(\.[^.:|\s]+)*:-?[0-9]+\.[0-9]{6}\|(c|g|ms|kv)$`)

// TestStatsdFromConfig: telemetry.statsd_address sends the gateway's
// metrics to a statsd daemon (a UDP socket here), next to Prometheus:
// counters, gauges and the request histogram, labels as name elements in
// order (listener, protocol, upstream, code, reason; empty ones left out, a
// value's dots as '_'), every line well formed. Stopping the agent sends
// what it buffered (its last request is counted) and leaves no goroutine
// (goleak in TestMain).
func TestStatsdFromConfig(t *testing.T) {
	srv := newStatsdServer(t)
	a := backend(t, "a")
	r := start(t, baseConfig+fmt.Sprintf(`
telemetry {
  statsd_address = %q
}
upstream "a" {
  route {
    path_prefix = "/a"
  }
  backend "a" {
    address = %q
  }
}
`, srv.conn.LocalAddr().String(), a.URL))
	if code, _ := r.get(t, r.url("main", "/a")); code != 200 {
		t.Fatalf("GET /a: %d", code)
	}
	if code, _ := r.get(t, r.url("main", "/missing")); code != 404 {
		t.Fatalf("GET /missing: %d", code)
	}
	for _, want := range []string{
		"impulse.requests.main.h3.a.2xx:1.000000|c",
		"impulse.requests.main.h3.4xx.no_route:1.000000|c",
		"impulse.request.duration.bucket.main.h3.a.2xx.+Inf:1.000000|c",
		"impulse.request.duration.count.main.h3.a.2xx:1.000000|c",
		"impulse.upstream.backends.eligible.a:1.000000|g",
	} {
		srv.waitLine(t, want)
	}
	srv.waitLine(t, "impulse.request.duration.bucket.main.h3.a.2xx.2_5:")
	srv.waitLine(t, "impulse.tls.certificate.expiry_seconds.main.default:")
	if _, body := r.control("GET", "/metrics", ""); !strings.Contains(body, `impulse_requests{code="2xx",listener="main",protocol="h3",reason="",upstream="a"} 1`) {
		t.Errorf("/metrics lost the request count next to statsd")
	}

	// The last request before the stop is sent by the stop's flush.
	if code, _ := r.get(t, r.url("main", "/a")); code != 200 {
		t.Fatalf("GET /a: %d", code)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	srv.waitLine(t, "impulse.request.duration.count.main.h3.a.2xx:1.000000|c") // the first request's
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(srv.all(), "impulse.requests.main.h3.a.2xx:1.000000|c") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the request just before the stop was not sent:\n%s", srv.all())
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, l := range strings.Split(srv.all(), "\n") {
		if !statsdLine.MatchString(l) {
			t.Errorf("malformed statsd line %q", l)
		}
	}
}

// TestStatsdSinkFlushAndShutdown: the sink splits datagrams at 1400 bytes,
// Shutdown sends what is buffered (the ticker is an hour away), later
// metrics are dropped without a panic, Shutdown twice is harmless, and a
// label value cannot break the line.
func TestStatsdSinkFlushAndShutdown(t *testing.T) {
	srv := newStatsdServer(t)
	s := newStatsdSink(srv.conn.LocalAddr().String(), time.Hour)
	for range 100 {
		s.IncrCounterWithLabels([]string{"requests"}, 1, []metrics.Label{{Name: "upstream", Value: "we b|x:y\nz.1"}, {Name: "reason", Value: ""}})
	}
	s.SetGauge([]string{"g"}, 2.5)
	s.AddSample([]string{"t"}, 12.5)
	s.EmitKey([]string{"k"}, 1)
	s.SetPrecisionGaugeWithLabels([]string{"p"}, 1e9, []metrics.Label{{Name: "l", Value: "v"}})
	s.Shutdown()
	s.IncrCounter([]string{"after"}, 1)
	s.Shutdown()
	srv.waitLine(t, "p.v:1000000000.000000|g")
	for _, want := range []string{"g:2.500000|g", "t:12.500000|ms", "k:1.000000|kv"} {
		srv.waitLine(t, want)
	}
	all := srv.all()
	if n := strings.Count(all, "requests.we_b_x_y_z_1:1.000000|c"); n != 100 {
		t.Errorf("%d counter lines, want 100:\n%s", n, all)
	}
	if strings.Contains(all, "after") {
		t.Error("a metric after Shutdown was sent")
	}
	for _, l := range strings.Split(all, "\n") {
		if !statsdLine.MatchString(l) {
			t.Errorf("malformed statsd line %q", l)
		}
	}
}

// TestStatsdSinkUnresolvable: an address that does not resolve drops the
// metrics (as UDP does while no daemon listens) and still shuts down.
func TestStatsdSinkUnresolvable(t *testing.T) {
	s := newStatsdSink("statsd.invalid:8125", time.Millisecond)
	s.IncrCounter([]string{"x"}, 1)
	s.Shutdown()
}

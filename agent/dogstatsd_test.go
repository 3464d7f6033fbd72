package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
)

// dogLine is one parsed DogStatsD datagram line:
// name:value|type[|@rate][|#tag,tag].
type dogLine struct {
	name, value, typ string
	tags             []string
}

// parseDogLine parses one line of the DogStatsD protocol
// (https://docs.datadoghq.com/developers/dogstatsd/datagram_shell/).
func parseDogLine(s string) (dogLine, error) {
	nameValue, rest, ok := strings.Cut(s, "|")
	if !ok {
		return dogLine{}, fmt.Errorf("%q: no type", s)
	}
	name, value, ok := strings.Cut(nameValue, ":")
	if !ok || name == "" || value == "" {
		return dogLine{}, fmt.Errorf("%q: not name:value", s)
	}
	fields := strings.Split(rest, "|")
	l := dogLine{name: name, value: value, typ: fields[0]}
	for _, f := range fields[1:] {
		switch {
		case strings.HasPrefix(f, "#"):
			l.tags = strings.Split(f[1:], ",")
		case strings.HasPrefix(f, "@"):
		default:
			return dogLine{}, fmt.Errorf("%q: unknown field %q", s, f)
		}
	}
	return l, nil
}

// has reports whether the line carries every tag of want.
func (l dogLine) has(want ...string) bool {
	for _, w := range want {
		if !slices.Contains(l.tags, w) {
			return false
		}
	}
	return true
}

// dogServer is a DogStatsD agent stand-in: a UDP socket on a free port whose
// datagrams are parsed into lines.
type dogServer struct {
	conn net.PacketConn
	mu   sync.Mutex
	got  []dogLine
	bad  []string
	done chan struct{}
}

func newDogServer(t *testing.T) *dogServer {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dogServer{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 65536)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			for _, line := range strings.Split(strings.TrimRight(string(buf[:n]), "\n"), "\n") {
				if l, err := parseDogLine(line); err != nil {
					s.bad = append(s.bad, err.Error())
				} else {
					s.got = append(s.got, l)
				}
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		conn.Close()
		<-s.done
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.bad) > 0 {
			t.Errorf("unparseable DogStatsD lines: %q", s.bad)
		}
	})
	return s
}

func (s *dogServer) addr() string { return s.conn.LocalAddr().String() }

// find returns the lines named name with type typ carrying every tag.
func (s *dogServer) find(name, typ string, tags ...string) []dogLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []dogLine
	for _, l := range s.got {
		if l.name == name && l.typ == typ && l.has(tags...) {
			out = append(out, l)
		}
	}
	return out
}

// lines returns everything received, for failure messages.
func (s *dogServer) lines() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, l := range s.got {
		fmt.Fprintf(&b, "%s:%s|%s|#%s\n", l.name, l.value, l.typ, strings.Join(l.tags, ","))
	}
	return b.String()
}

func (s *dogServer) waitFor(t *testing.T, name, typ string, tags ...string) dogLine {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ls := s.find(name, typ, tags...); len(ls) > 0 {
			return ls[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s|%s with tags %v in 10s; got:\n%s", name, typ, tags, s.lines())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDogStatsDSinkTypesAndTags: the sink sends counters as c, gauges as g
// and timers as ms, labels as name:value tags after the configured tags,
// the host as a host tag (never in the name, even when the host is named
// like a part of one) and no bare tag for an empty label.
func TestDogStatsDSinkTypesAndTags(t *testing.T) {
	srv := newDogServer(t)
	const host = "upstream" // as the DataDog sink's hostname splicing would cut out of impulse.upstream.in_flight
	s, err := newDogStatsdSink(srv.addr(), []string{"env:test", "canary"}, host)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	cfg := metrics.DefaultConfig(metricsPrefix)
	cfg.HostName, cfg.EnableHostname, cfg.EnableHostnameLabel, cfg.EnableRuntimeMetrics = host, false, false, false
	cfg.TimerGranularity = time.Millisecond
	m, err := metrics.New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}

	m.IncrCounterWithLabels([]string{"requests"}, 3, []metrics.Label{{Name: "listener", Value: "public"}, {Name: "upstream", Value: "web"}, {Name: "reason", Value: ""}})
	m.SetGaugeWithLabels([]string{"upstream", "in_flight"}, 7, []metrics.Label{{Name: "upstream", Value: "web"}})
	m.AddSampleWithLabels([]string{"discovery", "query", "duration"}, 12.5, []metrics.Label{{Name: "service", Value: "web"}})
	m.IncrCounter([]string{"access_log", "errors"}, 2)

	c := srv.waitFor(t, "impulse.requests", "c", "listener:public", "upstream:web")
	if c.value != "3" || !c.has("env:test", "canary", "host:"+host) || slices.ContainsFunc(c.tags, func(s string) bool { return strings.HasPrefix(s, "reason") }) {
		t.Errorf("counter %+v: want 3 with env:test, canary, host:%s and no reason tag", c, host)
	}
	if g := srv.waitFor(t, "impulse.upstream.in_flight", "g", "upstream:web", "host:"+host); g.value != "7" {
		t.Errorf("gauge %+v, want 7", g)
	}
	if ms := srv.waitFor(t, "impulse.discovery.query.duration", "ms", "service:web", "host:"+host); ms.value != "12.500000" {
		t.Errorf("timer %+v, want 12.5", ms)
	}
	if l := srv.waitFor(t, "impulse.access_log.errors", "c", "host:"+host); l.value != "2" {
		t.Errorf("unlabelled counter %+v, want 2", l)
	}
}

// TestDogStatsDFromConfig: telemetry.dogstatsd_address sends the gateway's
// metrics, fanned out next to Prometheus, with labels as tags: requests per
// listener, protocol, upstream and status class, the request duration
// histogram, upstream gauges; no host tag with disable_hostname (default).
func TestDogStatsDFromConfig(t *testing.T) {
	srv := newDogServer(t)
	a := backend(t, "a")
	r := start(t, baseConfig+fmt.Sprintf(`
telemetry {
  dogstatsd_address = %q
  dogstatsd_tags    = ["env:test"]
}
upstream "a" {
  route {
    path_prefix = "/a"
  }
  backend "a" {
    address = %q
  }
}
`, srv.addr(), a.URL))
	if code, _ := r.get(t, r.url("main", "/a")); code != 200 {
		t.Fatalf("GET /a: %d", code)
	}
	if code, _ := r.get(t, r.url("main", "/missing")); code != 404 {
		t.Fatalf("GET /missing: %d", code)
	}
	ok := srv.waitFor(t, "impulse.requests", "c", "listener:main", "protocol:h3", "upstream:a", "code:2xx", "env:test")
	if ok.value != "1" {
		t.Errorf("requests %+v, want 1", ok)
	}
	noRoute := srv.waitFor(t, "impulse.requests", "c", "listener:main", "code:4xx", "reason:no_route")
	if slices.ContainsFunc(noRoute.tags, func(s string) bool { return strings.HasPrefix(s, "upstream") }) {
		t.Errorf("a request without a route carries an upstream tag: %+v", noRoute)
	}
	srv.waitFor(t, "impulse.request.duration.bucket", "c", "upstream:a", "code:2xx", "le:+Inf")
	srv.waitFor(t, "impulse.request.duration.count", "c", "upstream:a", "code:2xx")
	srv.waitFor(t, "impulse.upstream.backends.eligible", "g", "upstream:a")
	srv.waitFor(t, "impulse.upstream.in_flight", "g", "upstream:a")
	for _, l := range srv.find("impulse.requests", "c") {
		if slices.ContainsFunc(l.tags, func(s string) bool { return strings.HasPrefix(s, "host:") }) {
			t.Errorf("host tag with disable_hostname = true: %+v", l)
		}
	}
	// Prometheus still counts the same requests.
	if _, body := r.control("GET", "/metrics", ""); !strings.Contains(body, `impulse_requests{code="2xx",listener="main",protocol="h3",reason="",upstream="a"} 1`) {
		t.Errorf("/metrics lost the request count next to DogStatsD")
	}
}

// TestHostnameNeverInNames: with disable_hostname = false the host is a
// host tag on DogStatsD lines, and /metrics keeps its names: go-metrics'
// EnableHostname would have renamed every gauge impulse_<host>_...
func TestHostnameNeverInNames(t *testing.T) {
	srv := newDogServer(t)
	a := backend(t, "a")
	r := start(t, baseConfig+fmt.Sprintf(`
telemetry {
  disable_hostname  = false
  dogstatsd_address = %q
}
upstream "a" {
  route {}
  backend "a" {
    address = %q
  }
}
`, srv.addr(), a.URL))
	if code, _ := r.get(t, r.url("main", "/a")); code != 200 {
		t.Fatalf("GET /a: %d", code)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	srv.waitFor(t, "impulse.requests", "c", "upstream:a", "host:"+host)
	srv.waitFor(t, "impulse.upstream.backends.eligible", "g", "upstream:a", "host:"+host)
	srv.waitFor(t, "impulse.tls.certificate.expiry_seconds", "g", "listener:main", "host:"+host)
	if strings.Contains(srv.lines(), "."+host+".") {
		t.Errorf("the host is in a DogStatsD name:\n%s", srv.lines())
	}

	_, body := r.control("GET", "/metrics", "")
	for _, want := range []string{`impulse_tls_certificate_expiry_seconds{listener="main"`, `impulse_upstream_backends_eligible{upstream="a"}`,
		`impulse_requests{code="2xx",listener="main",protocol="h3",reason="",upstream="a"} 1`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	promHost := regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(host, "_")
	if m := regexp.MustCompile(`(?m)^impulse_` + regexp.QuoteMeta(promHost) + `_\S*`).FindString(body); m != "" {
		t.Errorf("the host is in a Prometheus name: %s", m)
	}
	if strings.Contains(body, `host="`) {
		t.Errorf("a host label on /metrics (the scrape's instance label names the target)")
	}
}

// TestDogStatsDAddressErrors: a dogstatsd_address that is not host:port is
// refused by the configuration check, one that does not resolve at start
// is a *ConfigError; both at the value's file:line:column.
func TestDogStatsDAddressErrors(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1", `gateway.hcl:14:23: Invalid address: telemetry dogstatsd_address: "127.0.0.1" is not host:port.`},
		{"dogstatsd.invalid:8125", `gateway\.hcl:14:23: Cannot reach DogStatsD address: telemetry dogstatsd_address: .*dogstatsd\.invalid.*\.$`},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			err, logs := startErr(t, baseConfig+fmt.Sprintf(`
telemetry {
  dogstatsd_address = %q
}
`, tc.addr), nil, func() {})
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("error %T %v, want *ConfigError", err, err)
			}
			re := regexp.MustCompile(regexp.QuoteMeta(tc.want))
			if strings.Contains(tc.want, ".*") {
				re = regexp.MustCompile(tc.want)
			}
			if !re.MatchString(err.Error()) {
				t.Errorf("error\n  %s\nwant %s", err, tc.want)
			}
			if !strings.Contains(logs, err.Error()) {
				t.Errorf("the log output lacks the diagnostic:\n%s", logs)
			}
		})
	}
}

// TestReloadRefusesUnresolvableDogStatsD: a reload to a dogstatsd_address
// that does not resolve is refused at its value, as a start would be, and
// the running configuration stays.
func TestReloadRefusesUnresolvableDogStatsD(t *testing.T) {
	a := backend(t, "a")
	upstream := fmt.Sprintf("upstream \"a\" {\n  route {}\n  backend \"a\" {\n    address = %q\n  }\n}\n", a.URL)
	r := start(t, baseConfig+upstream)
	cert, key := filepath.Join(r.dir, "cert.pem"), filepath.Join(r.dir, "key.pem")
	bad := fmt.Sprintf(baseConfig+"telemetry {\n  dogstatsd_address = \"dogstatsd.invalid:8125\"\n}\n"+upstream, cert, key)
	if err := os.WriteFile(r.cfg, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	gen, diags, err := r.a.Reload()
	if err == nil || gen != 1 || len(diags) != 1 ||
		!regexp.MustCompile(`gateway\.hcl:13:23: Cannot reach DogStatsD address: telemetry dogstatsd_address: .*dogstatsd\.invalid`).MatchString(diags[0]) {
		t.Fatalf("reload: generation %d, %v, %q", gen, err, diags)
	}
	if code, _ := r.get(t, r.url("main", "/")); code != 200 {
		t.Errorf("GET after the refused reload: %d", code)
	}
}

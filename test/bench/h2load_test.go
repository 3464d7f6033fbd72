package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// h2loadOut is h2load 1.52's output of a timing-based run.
const h2loadOut = `starting benchmark...
spawning thread #0: 1 total client(s). Timing-based test with 0.5s of warm-up time and 3s of main duration for measurements.
Warm-up started for thread #0.
progress: 100% of clients started
TLS Protocol: TLSv1.3
Cipher: TLS_AES_128_GCM_SHA256
Server Temp Key: X25519 253 bits
Application protocol: h2
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 3.50s, 31234.67 req/s, 3.05MB/s
requests: 93704 total, 93754 started, 93704 done, 93700 succeeded, 4 failed, 0 errored, 2 timeout
status codes: 93700 2xx, 0 3xx, 0 4xx, 4 5xx
traffic: 9.15MB (9594032) total, 274.59KB (281181) headers (space savings 96.43%), 5.72MB (5997056) data
                     min         max         mean         sd        +/- sd
time for request:      352us     14.02ms      1.58ms       533us    82.83%
`

func TestParseH2loadOutput(t *testing.T) {
	s, err := parseH2loadOutput(h2loadOut)
	if err != nil {
		t.Fatal(err)
	}
	want := h2loadSummary{finished: 3500 * time.Millisecond, alpn: "h2", total: 93704, started: 93754, done: 93704, succeeded: 93700,
		failed: 4, timeout: 2, status2xx: 93700, status5xx: 4}
	if s != want {
		t.Errorf("got %+v\nwant %+v", s, want)
	}
	if s, _ := parseH2loadOutput("finished in 512.5ms, 1 req/s, 0B/s\nrequests: 1 total, 1 started, 1 done, 1 succeeded, 0 failed, 0 errored, 0 timeout\n"); s.finished != 512500*time.Microsecond {
		t.Errorf("ms: %v", s.finished)
	}
	if _, err := parseH2loadOutput("starting benchmark...\n"); err == nil {
		t.Error("no summary: want an error")
	}
}

func TestParseH2loadLog(t *testing.T) {
	rows, err := parseH2loadLog(strings.NewReader("1700000000000000\t200\t1500\n\n1700000000000100\t-1\t900\t extra\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []h2loadRow{{1700000000000000, 200, 1500}, {1700000000000100, -1, 900}}
	if !slices.Equal(rows, want) {
		t.Errorf("got %v, want %v", rows, want)
	}
	if rows[1].endUS() != 1700000000001000 {
		t.Errorf("end %d", rows[1].endUS())
	}
	for _, bad := range []string{"1\t200\n", "a\tb\tc\n"} {
		if _, err := parseH2loadLog(strings.NewReader(bad)); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func TestCPUAt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ss := []cpuSample{{t0, 1, 10}, {t0.Add(time.Second), 2, 12}, {t0.Add(2 * time.Second), 4, 12}}
	cases := []struct {
		at       time.Duration
		srv, cli float64
	}{
		{-time.Second, 1, 10},             // before: first sample
		{0, 1, 10},                        // exactly on one
		{500 * time.Millisecond, 1.5, 11}, // interpolated
		{1500 * time.Millisecond, 3, 12},
		{3 * time.Second, 4, 12}, // after: last sample
	}
	for _, c := range cases {
		srv, cli, ok := cpuAt(ss, t0.Add(c.at))
		if !ok || math.Abs(srv-c.srv) > 1e-9 || math.Abs(cli-c.cli) > 1e-9 {
			t.Errorf("cpuAt(%v) = %v, %v, %v; want %v, %v", c.at, srv, cli, ok, c.srv, c.cli)
		}
	}
	if _, _, ok := cpuAt(nil, t0); ok {
		t.Error("no samples: want !ok")
	}
}

func TestH2loadResult(t *testing.T) {
	// A 2 s window ending at the last response (t = 12 s): 3 successes, a
	// 503 and a failure; the server used 1 CPU s in the window (0.5/s).
	base := time.Unix(10, 0)
	us := func(d time.Duration) int64 { return base.Add(d).UnixMicro() }
	rows := []h2loadRow{
		{us(0), 200, 1000},
		{us(time.Second), 200, 3000},
		{us(time.Second), 503, 500},
		{us(1500 * time.Millisecond), -1, 100},
		{us(2*time.Second - 2000*time.Microsecond), 200, 2000}, // ends at 12 s
		{us(2*time.Second - 1000*time.Microsecond), 0, 1000},   // cut off at the stop, at 12 s
	}
	var ss []cpuSample
	for i := range 5 {
		at := base.Add(time.Duration(i-1) * time.Second) // 9 s … 13 s
		ss = append(ss, cpuSample{at: at, server: 0.5 * float64(i), cli: 0.25 * float64(i)})
	}
	// The window is [10 s, 12 s] (samples 1 and 3): 1 server CPU s, 0.5 client CPU s.
	res := h2loadResult(rows, h2loadSummary{timeout: 1}, 2*time.Second, ss)
	if res.Requests != 3 || res.ReqPerSec != 1.5 {
		t.Errorf("requests %d, %v/s", res.Requests, res.ReqPerSec)
	}
	if res.ErrorCount != 3 || res.Errors["status_503"] != 1 || res.Errors["failed"] != 1 || res.Errors["timeout"] != 1 {
		t.Errorf("errors %d %v", res.ErrorCount, res.Errors)
	}
	if math.Abs(res.ServerCPU-1) > 1e-6 || math.Abs(res.ClientCPU-0.5) > 1e-6 || math.Abs(res.ServerUtil-0.5) > 1e-6 {
		t.Errorf("cpu %v (%v), client %v", res.ServerCPU, res.ServerUtil, res.ClientCPU)
	}
	if math.Abs(res.CPUPerReqUS-1e6/3) > 1e-3 {
		t.Errorf("CPU/req %v", res.CPUPerReqUS)
	}
	if res.Latency.P99 != 3 || res.Latency.P50 != 2 {
		t.Errorf("latency %+v", res.Latency)
	}
}

func TestH2loadArgv(t *testing.T) {
	got := strings.Join(h2loadArgv("h2load", "https://127.0.0.1:1/small", "h1", 50, 1, 3*time.Second, time.Second, "/tmp/l"), " ")
	want := "h2load -t 1 -c 50 -m 1 -D 3000ms --warm-up-time 1000ms --log-file /tmp/l --h1 https://127.0.0.1:1/small"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestTCPShapesAndVerdict(t *testing.T) {
	sh := tcpShapes()
	var titles []string
	for _, s := range sh {
		titles = append(titles, s.short())
	}
	if got := strings.Join(titles, ", "); got != "h2 1×50, h2 50×1, h1 50×1" {
		t.Errorf("shapes %s", got)
	}
	if got := sh[2].title(); got != "HTTP/1.1 over TLS, small GET (64 B), 50 conns × 1 stream" {
		t.Errorf("title %q", got)
	}
	v := &verdicts{noise: 0.15}
	v.tcp(sh[0], map[string]summary{keyAgentH1: {cpuPerReq: 30}, keyCaddy: {cpuPerReq: 60}, keyTraefik: {cpuPerReq: 50}}, []float64{0.9, 0.5, 0.6})
	if len(v.rows) != 2 || v.rows[0].measured != "0.60×" || v.rows[0].result != "met" || !strings.Contains(v.rows[0].shape, "vs traefik") {
		t.Errorf("verdict %+v", v.rows)
	}
	if v.rows[1].measured != "0.60×" || v.rows[1].result != "met" {
		t.Errorf("paired verdict %+v", v.rows[1])
	}
	if q, ok := pairedRatio(map[string]float64{keyAgentH1: 30, keyCaddy: 60, keyTraefik: 50}); !ok || q != 0.6 {
		t.Errorf("pairedRatio = %v %v, want 0.6", q, ok)
	}
	if _, ok := pairedRatio(map[string]float64{keyAgentH1: 30}); ok {
		t.Error("pairedRatio without a proxy in the round")
	}
	v = &verdicts{noise: 0.15}
	v.tcp(sh[0], map[string]summary{keyAgentH1: {cpuPerReq: 30}}, nil)
	if len(v.rows) != 0 {
		t.Errorf("no proxy to compare: %+v", v.rows)
	}
}

func TestTraefikConfig(t *testing.T) {
	st := traefikStatic(8443, "/d/dyn.yml")
	for _, want := range []string{`address: "127.0.0.1:8443"`, "http3: {}", "tls: {}", `filename: "/d/dyn.yml"`, "checkNewVersion: false"} {
		if !strings.Contains(st, want) {
			t.Errorf("static config lacks %q:\n%s", want, st)
		}
	}
	dyn := traefikDynamic("127.0.0.1:9000", "/c.pem", "/k.pem")
	for _, want := range []string{"rule: \"PathPrefix(`/`)\"", `url: "http://127.0.0.1:9000"`, `certFile: "/c.pem"`, "defaultCertificate:"} {
		if !strings.Contains(dyn, want) {
			t.Errorf("dynamic config lacks %q:\n%s", want, dyn)
		}
	}
}

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// LoadConfig describes one load run: Conns connections, each carrying
// Streams concurrent requests (one worker per stream, each issuing its next
// request as soon as the previous one ends: a closed loop).
//
// HTTP/1.1 has no streams, so an h1 "connection" with Streams workers uses
// up to Streams TCP connections: the concurrency is the same, Conns×Streams.
type LoadConfig struct {
	URL      string
	Proto    string // "h3", "h2" (over TLS) or "h1"
	Conns    int
	Streams  int
	Duration time.Duration // measured time (ignored when Requests > 0)
	Requests int64         // stop after this many measured requests, successful or not
	Warmup   time.Duration // requests completed before this are not measured
	Method   string
	BodySize int64 // request body bytes (0: none)
	Expect   int64 // expected response body size; -1: any (Content-Length is always checked)
	Timeout  time.Duration
	CACert   string // PEM file to trust; empty: system roots
	Insecure bool
	PIDs     []int         // server processes whose CPU and RSS are measured
	RSSEvery time.Duration // RSS sampling interval (default 100 ms)
}

// Result is the outcome of one load run. Only requests that completed inside
// the measured window count; CPU is read from /proc at its two ends.
type Result struct {
	Proto      string           `json:"proto"`
	URL        string           `json:"url"`
	Conns      int              `json:"conns"`
	Streams    int              `json:"streams"`
	Seconds    float64          `json:"seconds"`
	Requests   int64            `json:"requests"`
	Errors     map[string]int64 `json:"errors,omitempty"`
	ErrorCount int64            `json:"error_count"`
	// ErrorSamples holds the first message seen for each error kind.
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	ReqPerSec    float64           `json:"req_per_sec"`
	// MiB counts the body bytes moved (both directions) during the window,
	// including parts of requests still in progress at its ends, so it does
	// not depend on when the large requests happen to complete; MiBPerSec
	// is MiB over Seconds.
	MiB       float64 `json:"mib"`
	MiBPerSec float64 `json:"mib_per_sec"`
	Latency   Latency `json:"latency"`
	// ServerCPU is the CPU seconds of PIDs during the window; ServerUtil
	// is that over the wall time (1.0 = one core busy).
	ServerCPU   float64 `json:"server_cpu_s"`
	CPUPerReqUS float64 `json:"server_cpu_per_req_us"`
	ServerUtil  float64 `json:"server_util"`
	ClientCPU   float64 `json:"client_cpu_s"`
	ClientUtil  float64 `json:"client_util"`
	// PeakRSS is the highest summed VmRSS of PIDs sampled during the run.
	PeakRSS int64 `json:"peak_rss_bytes"`
}

// worker accumulates what one stream measured.
type worker struct {
	lat     []time.Duration
	moved   atomic.Int64 // body bytes read and written so far
	errs    map[string]int64
	samples map[string]string
}

// ok records a completed exchange.
func (w *worker) ok(d time.Duration) { w.lat = append(w.lat, d) }

// fail records a failed exchange; after a failure below HTTP (no status)
// it pauses a millisecond so a dead target does not turn into a hot loop.
func (w *worker) fail(err error) {
	k := ErrorKind(err)
	w.errs[k]++
	if _, ok := w.samples[k]; !ok {
		w.samples[k] = err.Error()
	}
	if !strings.HasPrefix(k, "status_") && k != "short_body" {
		time.Sleep(time.Millisecond)
	}
}

// newRoundTripper returns the client for one connection of cfg and a
// function releasing it.
func newRoundTripper(cfg *LoadConfig, tc *tls.Config) (http.RoundTripper, func()) {
	switch cfg.Proto {
	case "h3":
		tr := &http3.Transport{
			TLSClientConfig:    tc,
			DisableCompression: true,
			QUICConfig: &quic.Config{
				MaxIdleTimeout:  30 * time.Second,
				KeepAlivePeriod: 10 * time.Second,
			},
		}
		return tr, func() { _ = tr.Close() }
	case "h2", "h1":
		p := new(http.Protocols)
		if cfg.Proto == "h2" {
			p.SetHTTP2(true)
		} else {
			p.SetHTTP1(true)
		}
		tr := &http.Transport{
			TLSClientConfig:     tc,
			Protocols:           p,
			DisableCompression:  true,
			MaxIdleConnsPerHost: cfg.Streams,
			ForceAttemptHTTP2:   cfg.Proto == "h2",
		}
		return tr, tr.CloseIdleConnections
	}
	panic("unknown proto " + cfg.Proto)
}

// clientTLS builds the client TLS configuration of cfg.
func clientTLS(cfg *LoadConfig) (*tls.Config, error) {
	tc := &tls.Config{InsecureSkipVerify: cfg.Insecure} //nolint:gosec // -insecure is explicit
	if cfg.CACert != "" {
		pem, err := os.ReadFile(cfg.CACert)
		if err != nil {
			return nil, err
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", cfg.CACert)
		}
	}
	return tc, nil
}

// RunLoad performs the load run described by cfg.
func RunLoad(ctx context.Context, cfg LoadConfig) (Result, error) {
	switch cfg.Proto {
	case "h1", "h2", "h3":
	default:
		return Result{}, fmt.Errorf("proto %q: want h1, h2 or h3", cfg.Proto)
	}
	if cfg.Conns < 1 || cfg.Streams < 1 {
		return Result{}, fmt.Errorf("need at least 1 connection and 1 stream")
	}
	if cfg.Requests <= 0 && cfg.Duration <= 0 {
		return Result{}, fmt.Errorf("need a duration or a request count")
	}
	if u, err := url.Parse(cfg.URL); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return Result{}, fmt.Errorf("URL %q: want http(s)://host:port/path", cfg.URL)
	}
	if cfg.RSSEvery <= 0 {
		cfg.RSSEvery = 100 * time.Millisecond
	}
	tc, err := clientTLS(&cfg)
	if err != nil {
		return Result{}, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	start := time.Now()
	measureStart := start.Add(cfg.Warmup)
	measureEnd := measureStart.Add(cfg.Duration) // duration mode only
	var counted atomic.Int64                     // request-count mode
	reached := make(chan time.Time, 1)           // when the count was reached

	workers := make([]*worker, cfg.Conns*cfg.Streams)
	var wg sync.WaitGroup
	for c := range cfg.Conns {
		rt, release := newRoundTripper(&cfg, tc)
		defer release()
		for s := range cfg.Streams {
			w := &worker{errs: map[string]int64{}, samples: map[string]string{}}
			workers[c*cfg.Streams+s] = w
			wg.Go(func() {
				buf := make([]byte, 64<<10)
				for runCtx.Err() == nil {
					t0 := time.Now()
					err := exchange(runCtx, &cfg, rt, buf, &w.moved)
					t1 := time.Now()
					if t1.Before(measureStart) {
						continue
					}
					if cfg.Requests > 0 {
						k := counted.Add(1)
						if k > cfg.Requests {
							return
						}
						if err != nil {
							w.fail(err)
						} else {
							w.ok(t1.Sub(t0))
						}
						if k == cfg.Requests {
							reached <- t1
							return
						}
						continue
					}
					if cfg.Requests <= 0 && !t1.Before(measureEnd) {
						return
					}
					if runCtx.Err() != nil {
						return // canceled at the end of the window: not a failure
					}
					if err != nil {
						w.fail(err)
						continue
					}
					w.ok(t1.Sub(t0))
				}
			})
		}
	}

	// Measurement window: CPU and RSS snapshots at both ends.
	var sampler *rssSampler
	var cpu0, self0 float64
	var windowStart time.Time
	var moved0 int64
	movedSum := func() int64 {
		var n int64
		for _, w := range workers {
			n += w.moved.Load()
		}
		return n
	}
	beginWindow := func() {
		windowStart = time.Now()
		moved0 = movedSum()
		cpu0, _ = PIDsCPU(cfg.PIDs)
		self0 = SelfCPU()
		if len(cfg.PIDs) > 0 {
			sampler = sampleRSS(cfg.PIDs, cfg.RSSEvery)
		}
	}
	wait := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	wait(time.Until(measureStart))
	beginWindow()
	var windowEnd time.Time
	if cfg.Requests > 0 {
		select {
		case windowEnd = <-reached:
		case <-ctx.Done():
			windowEnd = time.Now()
		}
	} else {
		wait(time.Until(measureEnd))
		windowEnd = time.Now()
	}
	cpu1, cpuErr := PIDsCPU(cfg.PIDs)
	self1 := SelfCPU()
	moved := movedSum() - moved0
	var peak int64
	if sampler != nil {
		peak = sampler.stop()
	}
	cancel()
	wg.Wait()
	if cpuErr != nil {
		return Result{}, fmt.Errorf("reading server CPU: %w", cpuErr)
	}

	res := Result{
		Proto: cfg.Proto, URL: cfg.URL, Conns: cfg.Conns, Streams: cfg.Streams,
		Errors: map[string]int64{}, ErrorSamples: map[string]string{},
		PeakRSS: peak,
	}
	if cfg.Requests > 0 {
		res.Seconds = windowEnd.Sub(windowStart).Seconds()
	} else {
		res.Seconds = cfg.Duration.Seconds()
	}
	var all []time.Duration
	for _, w := range workers {
		all = append(all, w.lat...)
		for k, v := range w.errs {
			res.Errors[k] += v
			res.ErrorCount += v
			if _, ok := res.ErrorSamples[k]; !ok {
				res.ErrorSamples[k] = w.samples[k]
			}
		}
	}
	res.Requests = int64(len(all))
	res.Latency = Summarize(all)
	res.MiB = float64(moved) / (1 << 20)
	if res.Seconds > 0 {
		res.ReqPerSec = float64(res.Requests) / res.Seconds
		res.MiBPerSec = res.MiB / res.Seconds
		res.ServerUtil = (cpu1 - cpu0) / res.Seconds
		res.ClientUtil = (self1 - self0) / res.Seconds
	}
	res.ServerCPU = cpu1 - cpu0
	res.ClientCPU = self1 - self0
	if res.Requests > 0 {
		res.CPUPerReqUS = res.ServerCPU / float64(res.Requests) * 1e6
	}
	return res, nil
}

// exchange performs one request and reads the whole response body, adding
// the body bytes sent and received to moved as they go.
func exchange(ctx context.Context, cfg *LoadConfig, rt http.RoundTripper, buf []byte, moved *atomic.Int64) error {
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	var body io.Reader
	if cfg.BodySize > 0 {
		body = &patternReader{n: cfg.BodySize, moved: moved}
	}
	req, err := http.NewRequestWithContext(ctx, cfg.Method, cfg.URL, body)
	if err != nil {
		return err
	}
	if cfg.BodySize > 0 {
		req.ContentLength = cfg.BodySize
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var n int64
	for {
		k, err := resp.Body.Read(buf)
		n += int64(k)
		moved.Add(int64(k))
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if resp.StatusCode/100 != 2 {
		return statusError{resp.StatusCode}
	}
	if (resp.ContentLength >= 0 && n != resp.ContentLength) || (cfg.Expect >= 0 && n != cfg.Expect) {
		return errShortBody
	}
	return nil
}

// patternBlock is the 64 KiB block every generated body repeats.
var patternBlock = func() []byte {
	b := make([]byte, 64<<10)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}()

// patternReader yields n bytes of patternBlock, repeated, adding what it
// yields to moved when that is set.
type patternReader struct {
	off, n int64
	moved  *atomic.Int64
}

func newPatternReader(n int64) *patternReader { return &patternReader{n: n} }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	k := copy(b[:min(int64(len(b)), p.n-p.off)], patternBlock[p.off%int64(len(patternBlock)):])
	p.off += int64(k)
	if p.moved != nil {
		p.moved.Add(int64(k))
	}
	return k, nil
}

package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// h2loadRow is one line of h2load's --log-file: the request's start (wall
// clock, µs since the epoch), its status (-1 when the request failed) and
// the time until the end of its response.
type h2loadRow struct {
	startUS int64
	status  int
	durUS   int64
}

// endUS is the wall-clock end of the response, µs since the epoch.
func (r h2loadRow) endUS() int64 { return r.startUS + r.durUS }

// parseH2loadLog parses h2load's --log-file: tab-separated "start_µs
// status duration_µs" (more columns may follow in later versions and are
// ignored). h2load writes a row only for requests that complete in its
// main duration, so warm-up requests are not in it.
func parseH2loadLog(r io.Reader) ([]h2loadRow, error) {
	var rows []h2loadRow
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) < 3 {
			return nil, fmt.Errorf("h2load log line %d: %d columns, want 3: %q", n, len(f), line)
		}
		start, err1 := strconv.ParseInt(f[0], 10, 64)
		status, err2 := strconv.Atoi(f[1])
		dur, err3 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("h2load log line %d: not three integers: %q", n, line)
		}
		rows = append(rows, h2loadRow{startUS: start, status: status, durUS: dur})
	}
	return rows, sc.Err()
}

// h2loadSummary is what h2load prints at the end of a run.
type h2loadSummary struct {
	// finished is "finished in 3.50s": warm-up plus main duration.
	finished time.Duration
	// alpn is the "Application protocol:" h2load negotiated ("h2",
	// "http/1.1"), or "".
	alpn                                       string
	total, started, done, succeeded, failed    int64
	errored, timeout                           int64
	status2xx, status3xx, status4xx, status5xx int64
}

var (
	reFinished = regexp.MustCompile(`finished in ([0-9.]+)(us|ms|s),`)
	reRequests = regexp.MustCompile(`requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	reStatus   = regexp.MustCompile(`status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
	reALPN     = regexp.MustCompile(`(?m)^Application protocol: (\S+)`)
)

// parseH2loadOutput parses the summary lines of h2load's standard output:
//
//	finished in 3.00s, 31234.67 req/s, 3.05MB/s
//	requests: 93704 total, 93754 started, 93704 done, 93704 succeeded, 0 failed, 0 errored, 0 timeout
//	status codes: 93704 2xx, 0 3xx, 0 4xx, 0 5xx
func parseH2loadOutput(out string) (h2loadSummary, error) {
	var s h2loadSummary
	m := reFinished.FindStringSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("h2load: no \"finished in\" line in its output")
	}
	x, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second}[m[2]]
	s.finished = time.Duration(x * float64(unit))
	atoi := func(v string) int64 { n, _ := strconv.ParseInt(v, 10, 64); return n }
	m = reRequests.FindStringSubmatch(out)
	if m == nil {
		return s, fmt.Errorf("h2load: no \"requests:\" line in its output")
	}
	for i, p := range []*int64{&s.total, &s.started, &s.done, &s.succeeded, &s.failed, &s.errored, &s.timeout} {
		*p = atoi(m[i+1])
	}
	if m = reALPN.FindStringSubmatch(out); m != nil {
		s.alpn = m[1]
	}
	if m = reStatus.FindStringSubmatch(out); m != nil {
		for i, p := range []*int64{&s.status2xx, &s.status3xx, &s.status4xx, &s.status5xx} {
			*p = atoi(m[i+1])
		}
	}
	return s, nil
}

// cpuSample is the CPU seconds of the server and of the client read at one
// wall-clock instant.
type cpuSample struct {
	at          time.Time
	server, cli float64
}

// cpuAt interpolates the CPU counters of samples (in time order) linearly
// at t; before the first or after the last sample it returns that sample's
// values. ok is false when there are no samples.
func cpuAt(samples []cpuSample, t time.Time) (server, cli float64, ok bool) {
	if len(samples) == 0 {
		return 0, 0, false
	}
	i := sort.Search(len(samples), func(i int) bool { return !samples[i].at.Before(t) })
	switch {
	case i == 0:
		return samples[0].server, samples[0].cli, true
	case i == len(samples):
		l := samples[len(samples)-1]
		return l.server, l.cli, true
	}
	a, b := samples[i-1], samples[i]
	span := b.at.Sub(a.at).Seconds()
	if span <= 0 {
		return b.server, b.cli, true
	}
	f := t.Sub(a.at).Seconds() / span
	return a.server + f*(b.server-a.server), a.cli + f*(b.cli-a.cli), true
}

// h2loadResult turns one h2load run into a Result: the window is the
// main duration d ending at the last row's end in the log (the last
// response, or the stop that cut the streams still open); latency is over
// the log's successful (2xx) rows, errors are its other rows by status
// except those cut off at the stop (status 0); CPU is interpolated from
// samples at the window's two ends.
func h2loadResult(rows []h2loadRow, sum h2loadSummary, d time.Duration, samples []cpuSample) Result {
	res := Result{Errors: map[string]int64{}, ErrorSamples: map[string]string{}, Seconds: d.Seconds()}
	var lat []time.Duration
	var last int64
	for _, r := range rows {
		last = max(last, r.endUS())
		switch {
		case r.status >= 200 && r.status < 300:
			lat = append(lat, time.Duration(r.durUS)*time.Microsecond)
		case r.status == 0:
			// No response yet: an HTTP/2 stream still open when h2load
			// ended the main duration (it closes the session with
			// NO_ERROR, so the stream counts as "successful" without a
			// status). Not an error, not a completed request.
		case r.status < 0:
			res.Errors["failed"]++
			res.ErrorSamples["failed"] = "h2load: stream or connection failed (no status)"
		default:
			k := "status_" + strconv.Itoa(r.status)
			res.Errors[k]++
			res.ErrorSamples[k] = fmt.Sprintf("h2load: status %d", r.status)
		}
	}
	if sum.timeout > 0 {
		res.Errors["timeout"] += sum.timeout
		res.ErrorSamples["timeout"] = "h2load: request timed out"
	}
	for _, n := range res.Errors {
		res.ErrorCount += n
	}
	res.Requests = int64(len(lat))
	res.Latency = Summarize(lat)
	if res.Seconds > 0 {
		res.ReqPerSec = float64(res.Requests) / res.Seconds
	}
	if last > 0 {
		end := time.UnixMicro(last)
		s1, c1, ok1 := cpuAt(samples, end)
		s0, c0, ok0 := cpuAt(samples, end.Add(-d))
		if ok0 && ok1 {
			res.ServerCPU, res.ClientCPU = s1-s0, c1-c0
		}
	}
	if res.Seconds > 0 {
		res.ServerUtil = res.ServerCPU / res.Seconds
		res.ClientUtil = res.ClientCPU / res.Seconds
	}
	if res.Requests > 0 {
		res.CPUPerReqUS = res.ServerCPU / float64(res.Requests) * 1e6
	}
	return res
}

// h2loadArgv is the h2load command line of one run: proto "h2" (ALPN h2
// over TLS) or "h1" (--h1: HTTP/1.1 over TLS), conns connections with
// streams concurrent streams each, one thread, the main duration d after
// warmup, every measured request logged to logFile.
func h2loadArgv(bin, url, proto string, conns, streams int, d, warmup time.Duration, logFile string) []string {
	argv := []string{bin, "-t", "1", "-c", strconv.Itoa(conns), "-m", strconv.Itoa(streams),
		"-D", secs(d), "--warm-up-time", secs(warmup), "--log-file", logFile}
	if proto == "h1" {
		argv = append(argv, "--h1")
	}
	return append(argv, url)
}

// secs renders d for h2load's duration options: whole milliseconds.
func secs(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }

// h2load runs h2load on the auxiliary core against s (proto "h2" or "h1",
// small GET) and returns its result, sampling the CPU of s and of h2load
// every 20 ms to cut the window's CPU out exactly.
func (e *env) h2load(s *server, proto, path string, conns, streams int, d, warmup time.Duration) (Result, error) {
	logFile := filepath.Join(e.dir, "h2load.log")
	_ = os.Remove(logFile)
	c, err := startChild("h2load", e.taskset, e.auxCPU,
		h2loadArgv(e.h2loadBin, s.Base+path, proto, conns, streams, d, warmup, logFile))
	if err != nil {
		return Result{}, err
	}
	var samples []cpuSample
	tick := time.NewTicker(20 * time.Millisecond)
	limit := time.After(warmup + d + 60*time.Second)
	sample := func() {
		srv, err1 := ProcessCPU(s.PID())
		cli, err2 := ProcessCPU(c.PID)
		if err1 == nil && err2 == nil {
			samples = append(samples, cpuSample{at: time.Now(), server: srv, cli: cli})
		}
	}
loop:
	for {
		sample()
		select {
		case <-c.done:
			// h2load's /proc entry is gone: the server's counter closes
			// the series, with the client's last reading.
			if srv, err := ProcessCPU(s.PID()); err == nil && len(samples) > 0 {
				samples = append(samples, cpuSample{at: time.Now(), server: srv, cli: samples[len(samples)-1].cli})
			}
			break loop
		case <-tick.C:
		case <-limit:
			c.Stop()
			tick.Stop()
			return Result{}, fmt.Errorf("h2load did not finish; output:\n%s", c.Output())
		}
	}
	tick.Stop()
	if !c.cmd.ProcessState.Success() {
		return Result{}, fmt.Errorf("h2load: %v; output:\n%s", c.cmd.ProcessState, c.Output())
	}
	sum, err := parseH2loadOutput(c.Output())
	if err != nil {
		return Result{}, fmt.Errorf("%w:\n%s", err, c.Output())
	}
	if want := map[string]string{"h2": "h2", "h1": "http/1.1"}[proto]; sum.alpn != want {
		return Result{}, fmt.Errorf("h2load negotiated %q, want %q", sum.alpn, want)
	}
	f, err := os.Open(logFile)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	rows, err := parseH2loadLog(f)
	if err != nil {
		return Result{}, err
	}
	res := h2loadResult(rows, sum, d, samples)
	res.Proto, res.URL, res.Conns, res.Streams = proto, s.Base+path, conns, streams
	return res, nil
}

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/internal/testtool"
)

// loadResult is what a bounded load run saw: requests sent, the answers
// that were not a 2xx (status, or -1 for a failed request) and the
// latencies of the successful ones.
type loadResult struct {
	requests int
	failed   map[int]int // status (-1: no answer) → count
	ok       []time.Duration
	maxFail  time.Duration   // the slowest failed request
	fail     []time.Duration // the failed requests' latencies
}

// failures is the number of requests that did not get a 2xx.
func (r loadResult) failures() int {
	n := 0
	for _, c := range r.failed {
		n += c
	}
	return n
}

// p99 is the 99th percentile latency of the successful requests.
func (r loadResult) p99() time.Duration { return percentile(r.ok, 99) }

// percentile is the p-th percentile of ds (0 when empty).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

func (r loadResult) String() string {
	return fmt.Sprintf("%d requests, %d failed %v, p99 %v", r.requests, r.failures(), r.failed, r.p99().Round(100*time.Microsecond))
}

// loadProtocols are the ingresses R09 runs over: HTTP/2 over TLS (h2load,
// nghttp2's client) and HTTP/3 (quic-go's client).
var loadProtocols = []string{"h2", "h3"}

// runLoad sends requests GETs of url with clients concurrent clients over
// proto ("h2": h2load, one connection per client; "h3": quic-go, one
// connection per client).
func runLoad(t *testing.T, proto, url string, clients, requests int) loadResult {
	t.Helper()
	if proto == "h2" {
		return h2loadRun(t, url, clients, requests)
	}
	return h3LoadRun(t, url, clients, requests)
}

var (
	reH2Requests = regexp.MustCompile(`requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
)

// h2loadRun runs h2load (HTTP/2 over TLS) and reads its per-request log.
func h2loadRun(t *testing.T, url string, clients, requests int) loadResult {
	t.Helper()
	bin := h2loadBin(t)
	logFile := filepath.Join(t.TempDir(), "h2load.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-n", strconv.Itoa(requests), "-c", strconv.Itoa(clients), "-m", "1",
		"--log-file", logFile, url).CombinedOutput()
	if err != nil {
		t.Fatalf("h2load: %v\n%s", err, out)
	}
	m := reH2Requests.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("h2load printed no summary:\n%s", out)
	}
	res := loadResult{failed: map[int]int{}}
	res.requests, _ = strconv.Atoi(m[1])
	f, err := os.Open(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	logged := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		status, _ := strconv.Atoi(fields[1])
		us, _ := strconv.ParseInt(fields[2], 10, 64)
		d := time.Duration(us) * time.Microsecond
		logged++
		if status >= 200 && status < 300 {
			res.ok = append(res.ok, d)
			continue
		}
		res.failed[status]++
		res.maxFail = max(res.maxFail, d)
		res.fail = append(res.fail, d)
	}
	if lost := res.requests - logged; lost > 0 {
		res.failed[-1] += lost // not done: no answer at all
	}
	return res
}

// h2loadBin is h2load (Debian nghttp2-client, installed by scripts/deps.sh).
func h2loadBin(t *testing.T) string {
	t.Helper()
	return testtool.Need(t, "h2load", "nghttp2-client")
}

// h3LoadRun sends requests GETs over HTTP/3 from clients goroutines, each
// with a QUIC connection of its own, one request at a time.
func h3LoadRun(t *testing.T, url string, clients, requests int) loadResult {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	res := loadResult{requests: requests, failed: map[int]int{}}
	var wg sync.WaitGroup
	for range clients {
		tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool, ServerName: "localhost"}}
		c := &http.Client{Transport: tr, Timeout: time.Minute}
		wg.Go(func() {
			defer tr.Close()
			for next.Add(1) <= int64(requests) {
				start := time.Now()
				status := -1
				if resp, err := c.Get(url); err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil {
						status = resp.StatusCode
					}
				}
				d := time.Since(start)
				mu.Lock()
				if status >= 200 && status < 300 {
					res.ok = append(res.ok, d)
				} else {
					res.failed[status]++
					res.maxFail = max(res.maxFail, d)
					res.fail = append(res.fail, d)
					res.fail = append(res.fail, d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res
}

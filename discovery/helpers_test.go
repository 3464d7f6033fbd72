package discovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics"
)

// waitTimeout bounds every wait-for-condition in these tests.
const waitTimeout = 20 * time.Second

// waitFor polls cond every 10 ms until it holds; it fails the test after
// waitTimeout. No test relies on a fixed sleep for correctness.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recorder collects the snapshots emitted by a watch.
type recorder struct{ collector[Snapshot] }

// collector keeps every value a watch emits, safe for concurrent use.
type collector[T any] struct {
	mu    sync.Mutex
	snaps []T
}

func (r *collector[T]) emit(s T) {
	r.mu.Lock()
	r.snaps = append(r.snaps, s)
	r.mu.Unlock()
}

func (r *collector[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.snaps)
}

func (r *recorder) count() int { return len(r.all()) }

// last returns the latest snapshot and whether there is one.
func (r *recorder) last() (Snapshot, bool) {
	s := r.all()
	if len(s) == 0 {
		return Snapshot{}, false
	}
	return s[len(s)-1], true
}

// waitIDs waits until the latest snapshot holds exactly ids and returns it.
func (r *recorder) waitIDs(t testing.TB, ids ...string) Snapshot {
	t.Helper()
	var s Snapshot
	waitFor(t, fmt.Sprintf("snapshot %v (have %v)", ids, lazyIDs{r}), func() bool {
		var ok bool
		s, ok = r.last()
		return ok && slices.Equal(instanceIDs(s), ids)
	})
	return s
}

// lazyIDs prints the recorder's latest IDs when formatted.
type lazyIDs struct{ r *recorder }

func (l lazyIDs) String() string {
	s, ok := l.r.last()
	if !ok {
		return "nothing"
	}
	return fmt.Sprint(instanceIDs(s))
}

func instanceIDs(s Snapshot) []string {
	ids := make([]string, 0, len(s.Instances))
	for _, in := range s.Instances {
		ids = append(ids, in.ServiceID)
	}
	return ids
}

// running is a Watch started in its own goroutine.
type running struct {
	rec     *recorder
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

// startWatch runs c.Watch(q) in a goroutine; the test's cleanup stops it.
func startWatch(t testing.TB, c *Client, q Query) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &running{rec: &recorder{}, cancel: cancel, done: make(chan error, 1)}
	go func() { w.done <- c.Watch(ctx, q, w.rec.emit) }()
	t.Cleanup(func() { w.stop(t) })
	return w
}

// stop cancels the watch and requires it to return context.Canceled within 2 s.
func (w *running) stop(t testing.TB) {
	t.Helper()
	if w.stopped {
		return
	}
	w.stopped = true
	w.cancel()
	select {
	case err := <-w.done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Watch returned %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Watch did not return within 2s of cancel")
	}
}

// syncBuffer is a goroutine-safe log destination.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// memSink is a minimal go-metrics sink recording counters and gauges by
// "name;label=value;…" (labels in emission order).
type memSink struct {
	metrics.BlackholeSink
	mu       sync.Mutex
	counters map[string]float64
	gauges   map[string]float64
	samples  map[string]int
}

func newMetrics(t testing.TB) (*metrics.Metrics, *memSink) {
	s := &memSink{counters: map[string]float64{}, gauges: map[string]float64{}, samples: map[string]int{}}
	cfg := metrics.DefaultConfig("impulse")
	cfg.EnableHostname, cfg.EnableRuntimeMetrics = false, false
	m, err := metrics.New(cfg, s)
	if err != nil {
		t.Fatal(err)
	}
	return m, s
}

func flat(key []string, labels []metrics.Label) string {
	parts := []string{strings.Join(key, ".")}
	for _, l := range labels {
		parts = append(parts, l.Name+"="+l.Value)
	}
	return strings.Join(parts, ";")
}

func (s *memSink) IncrCounterWithLabels(key []string, val float32, labels []metrics.Label) {
	s.mu.Lock()
	s.counters[flat(key, labels)] += float64(val)
	s.mu.Unlock()
}

func (s *memSink) SetGaugeWithLabels(key []string, val float32, labels []metrics.Label) {
	s.SetPrecisionGaugeWithLabels(key, float64(val), labels)
}

func (s *memSink) SetPrecisionGaugeWithLabels(key []string, val float64, labels []metrics.Label) {
	s.mu.Lock()
	s.gauges[flat(key, labels)] = val
	s.mu.Unlock()
}

func (s *memSink) AddSampleWithLabels(key []string, _ float32, labels []metrics.Label) {
	s.mu.Lock()
	s.samples[flat(key, labels)]++
	s.mu.Unlock()
}

func (s *memSink) counter(name string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counters[name]
}

func (s *memSink) gauge(name string) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gauges[name]
}

func (s *memSink) sampleCount(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples[name]
}

// counterNames lists recorded counters, for failure messages.
func (s *memSink) counterNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for k, v := range s.counters {
		out = append(out, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(out)
	return out
}

// tWriter sends log lines to t.Log (shown for failing or -v tests).
type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func hclogTest(t testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "discovery", Level: hclog.Debug, Output: tWriter{t}})
}

// teeLogger logs both to t and to out, so tests can assert on log content.
func teeLogger(t testing.TB, out *syncBuffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "discovery", Level: hclog.Debug,
		Output: io.MultiWriter(tWriter{t}, out)})
}

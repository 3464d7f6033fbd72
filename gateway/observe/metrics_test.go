package observe

import (
	"testing"
	"time"

	"github.com/hashicorp/go-metrics"
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
		gm := NewMetrics(nil)
		gm.request("l", "h3", "u", 200, "", tt.d)
		v, _ := gm.requests.Load(RequestLabels{"l", "h3", "u", "2xx", ""})
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
	gm := NewMetrics(m)
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
	gm.Flush(t0, live)
	before := emitted()
	if before["impulse.requests/a"] != 1 || before["impulse.request.duration.count/gone"] != 1 {
		t.Fatalf("first flush emitted %v", before)
	}
	delete(alive, "gone")
	gm.Flush(t0.Add(time.Second), live) // nothing new, too soon to touch
	if got := emitted(); got["impulse.requests/a"] != 1 {
		t.Fatalf("an idle series was touched before touchEvery: %v", got)
	}
	gm.Flush(t0.Add(touchEvery+time.Second), live)
	got := emitted()
	if got["impulse.requests/a"] != 2 || got["impulse.request.duration.count/a"] != 2 {
		t.Errorf("idle series of a live upstream not touched: %v", got)
	}
	if got["impulse.requests/gone"] != 1 {
		t.Errorf("series of a removed upstream touched: %v", got)
	}
	gm.Flush(t0.Add(forgetAfter+2*time.Second), live)
	if _, ok := gm.requests.Load(RequestLabels{"l", "h3", "gone", "2xx", ""}); ok {
		t.Error("entry of a removed upstream kept after forgetAfter")
	}
	if _, ok := gm.requests.Load(RequestLabels{"l", "h3", "a", "2xx", ""}); !ok {
		t.Error("entry of a live upstream forgotten")
	}
}

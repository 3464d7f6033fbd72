package gateway

import (
	"testing"
	"time"
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
		gm.request("l", "u", 200, "", tt.d)
		v, _ := gm.requests.Load(requestKey{"l", "u", "2xx", ""})
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

package ratelimit

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAllow measures the handler's whole use of a Limiter for one
// admitted request from a known client: Key from the request, then Allow
// (run with -benchmem: 0 allocations).
func BenchmarkAllow(b *testing.B) {
	r := &http.Request{RemoteAddr: "192.0.2.1:50123", Header: http.Header{"X-Api-Key": {"0123456789abcdef"}}}
	for _, key := range []string{"client_ip", "header:X-Api-Key", "route"} {
		b.Run(key, func(b *testing.B) {
			l := mustNew(b, Config{RequestsPerSecond: MaxRequestsPerSecond, Burst: 1 << 30, Key: key})
			now := time.Now()
			b.ReportAllocs()
			for b.Loop() {
				if ok, _ := l.Allow(l.Key(r, "0|example.com|/api|"), now); !ok {
					b.Fatal("refused")
				}
			}
		})
	}
}

// BenchmarkAllowParallel is BenchmarkAllow for client_ip keys from many
// goroutines and 1,024 clients (the shards' locks).
func BenchmarkAllowParallel(b *testing.B) {
	l := mustNew(b, Config{RequestsPerSecond: MaxRequestsPerSecond, Burst: 1 << 30})
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		reqs[i] = &http.Request{RemoteAddr: "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256) + ":443"}
	}
	now := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Allow(l.Key(reqs[i%len(reqs)], ""), now)
			i++
		}
	})
}

// BenchmarkAllowNewKeys is the cost of a key seen for the first time with
// the table at its cap (a flood of distinct clients).
func BenchmarkAllowNewKeys(b *testing.B) {
	l := mustNew(b, Config{RequestsPerSecond: 50, Burst: 10, MaxKeys: 4096})
	now := time.Now()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.Allow(StringKey(strconv.Itoa(i)), now)
		i++
	}
}

// BenchmarkRefused is the cost of a refused request (the 429 path's
// policy part).
func BenchmarkRefused(b *testing.B) {
	l := mustNew(b, Config{RequestsPerSecond: 1, Burst: 1})
	k := StringKey("a")
	now := time.Now()
	l.Allow(k, now)
	b.ReportAllocs()
	for b.Loop() {
		if ok, _ := l.Allow(k, now); ok {
			b.Fatal("admitted")
		}
	}
}

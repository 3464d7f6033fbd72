package ratelimit

import (
	"errors"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustNew(t testing.TB, c Config) *Limiter {
	t.Helper()
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNormalize(t *testing.T) {
	cases := []struct {
		in   Config
		want Config
		err  bool
	}{
		{in: Config{RequestsPerSecond: 50, Burst: 10, Key: "client_ip"}, want: Config{RequestsPerSecond: 50, Burst: 10, Key: "client_ip", MaxKeys: DefaultMaxKeys}},
		{in: Config{RequestsPerSecond: 50}, want: Config{RequestsPerSecond: 50, Burst: 50, Key: "client_ip", MaxKeys: DefaultMaxKeys}},
		{in: Config{RequestsPerSecond: 2.5}, want: Config{RequestsPerSecond: 2.5, Burst: 3, Key: "client_ip", MaxKeys: DefaultMaxKeys}},
		{in: Config{RequestsPerSecond: 0.1}, want: Config{RequestsPerSecond: 0.1, Burst: 1, Key: "client_ip", MaxKeys: DefaultMaxKeys}},
		{in: Config{RequestsPerSecond: 1, Key: "header:x-api-key"}, want: Config{RequestsPerSecond: 1, Burst: 1, Key: "header:X-Api-Key", MaxKeys: DefaultMaxKeys}},
		{in: Config{RequestsPerSecond: 1, Key: "route", MaxKeys: 10}, want: Config{RequestsPerSecond: 1, Burst: 1, Key: "route", MaxKeys: 10}},
		{in: Config{RequestsPerSecond: 1, MaxKeys: 5000}, want: Config{RequestsPerSecond: 1, Burst: 1, Key: "client_ip", MaxKeys: 4992}},
		{in: Config{RequestsPerSecond: 0}, err: true},
		{in: Config{RequestsPerSecond: -1}, err: true},
		{in: Config{RequestsPerSecond: 2e9}, err: true},
		{in: Config{RequestsPerSecond: 1, Burst: -1}, err: true},
		{in: Config{RequestsPerSecond: 1, MaxKeys: -1}, err: true},
		{in: Config{RequestsPerSecond: 1, Key: "client-ip"}, err: true},
		{in: Config{RequestsPerSecond: 1, Key: "header:"}, err: true},
		{in: Config{RequestsPerSecond: 1, Key: "header:X User"}, err: true},
		{in: Config{RequestsPerSecond: 1, Key: "header:host"}, err: true},
		{in: Config{RequestsPerSecond: 1, Key: "route:x"}, err: true},
		{in: Config{RequestsPerSecond: 1, Key: "cookie:a"}, err: true},
	}
	for _, c := range cases {
		got, err := c.in.Normalize()
		if c.err {
			if !errors.Is(err, ErrConfig) {
				t.Errorf("Normalize(%+v) = %+v, %v; want an ErrConfig", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Normalize(%+v) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// step is one Allow call of a script: at t0+at, for key.
type step struct {
	at    time.Duration
	key   string
	ok    bool
	retry time.Duration // when !ok
}

func TestAllow(t *testing.T) {
	ms := time.Millisecond
	burst := func(key string, n int, at time.Duration) []step {
		var s []step
		for range n {
			s = append(s, step{at: at, key: key, ok: true})
		}
		return s
	}
	cat := func(parts ...[]step) []step {
		var s []step
		for _, p := range parts {
			s = append(s, p...)
		}
		return s
	}
	cases := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"R07 burst then one per 20ms", Config{RequestsPerSecond: 50, Burst: 10}, cat(
			burst("a", 10, 0),
			[]step{{0, "a", false, 20 * ms}, {0, "a", false, 20 * ms}, // a refusal takes nothing
				{10 * ms, "a", false, 10 * ms}, {20 * ms, "a", true, 0}, {20 * ms, "a", false, 20 * ms},
				{0, "b", true, 0}}, // another key: its own bucket
			burst("b", 9, 0),
			[]step{{0, "b", false, 20 * ms},
				{time.Second, "a", true, 0}}, // refilled: 10 again
			burst("a", 9, time.Second),
			[]step{{time.Second, "a", false, 20 * ms}},
		)},
		{"slow rate", Config{RequestsPerSecond: 0.5, Burst: 1}, []step{
			{0, "a", true, 0}, {0, "a", false, 2 * time.Second}, {1500 * ms, "a", false, 500 * ms}, {2 * time.Second, "a", true, 0}}},
		{"default burst is one second", Config{RequestsPerSecond: 3}, cat(burst("a", 3, 0), []step{{0, "a", false, 333333334}})},
		{"burst never exceeded after a long idle", Config{RequestsPerSecond: 100, Burst: 2}, cat(
			burst("a", 2, 0), []step{{0, "a", false, 10 * ms}}, burst("a", 2, time.Hour), []step{{time.Hour, "a", false, 10 * ms}})},
		{"clock going back", Config{RequestsPerSecond: 1, Burst: 1}, []step{
			{time.Second, "a", true, 0}, {0, "a", false, time.Second}, {time.Second, "a", false, time.Second}, {2 * time.Second, "a", true, 0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := mustNew(t, c.cfg)
			for i, s := range c.steps {
				ok, retry := l.Allow(StringKey(s.key), t0.Add(s.at))
				if ok != s.ok || retry != s.retry {
					t.Fatalf("step %d (%s at +%v): Allow = %v, %v; want %v, %v", i, s.key, s.at, ok, retry, s.ok, s.retry)
				}
			}
		})
	}
}

func TestKey(t *testing.T) {
	req := func(remote string, h http.Header) *http.Request {
		if h == nil {
			h = http.Header{}
		}
		return &http.Request{RemoteAddr: remote, Header: h}
	}
	ip := AddrKey(netip.MustParseAddr("192.0.2.1"))
	ip6 := AddrKey(netip.MustParseAddr("2001:db8::1"))
	cases := []struct {
		key   string
		r     *http.Request
		route string
		want  Key
	}{
		{"client_ip", req("192.0.2.1:443", nil), "", ip},
		{"client_ip", req("192.0.2.1:9999", nil), "", ip}, // the port is not part of it
		{"client_ip", req("[::ffff:192.0.2.1]:443", nil), "", ip},
		{"client_ip", req("192.0.2.1", nil), "", ip},
		{"client_ip", req("[2001:db8::1]:443", nil), "", ip6},
		{"client_ip", req("[2001:db8::1%eth0]:443", nil), "", ip6},
		{"client_ip", req("", nil), "", AddrKey(netip.Addr{})},
		{"client_ip", req("@", nil), "", AddrKey(netip.Addr{})},
		{"header:X-Api-Key", req("192.0.2.1:1", http.Header{"X-Api-Key": {"k1", "k2"}}), "", StringKey("k1")},
		{"header:x-api-key", req("192.0.2.1:1", http.Header{"X-Api-Key": {"k1"}}), "", StringKey("k1")},
		{"header:X-Api-Key", req("192.0.2.1:1", nil), "", StringKey("")},
		{"header:X-Api-Key", req("192.0.2.1:1", http.Header{"X-Api-Key": {""}}), "", StringKey("")},
		{"route", req("192.0.2.1:1", nil), "r1", StringKey("r1")},
	}
	for _, c := range cases {
		l := mustNew(t, Config{RequestsPerSecond: 1, Key: c.key})
		if got := l.Key(c.r, c.route); got != c.want {
			t.Errorf("%s: Key(%q, %v, %q) = %v, want %v", c.key, c.r.RemoteAddr, c.r.Header, c.route, got, c.want)
		}
	}
	if ip == ip6 || StringKey("a") == StringKey("b") || AddrKey(netip.MustParseAddr("192.0.2.2")) == ip {
		t.Error("distinct values share a key")
	}
}

// TestLRU: at the cap a new key takes the least recently used bucket; a
// returning key starts full; the recently used keep their state.
func TestLRU(t *testing.T) {
	l := mustNew(t, Config{RequestsPerSecond: 1, Burst: 2, MaxKeys: 3})
	use := func(key string) bool { ok, _ := l.Allow(StringKey(key), t0); return ok }
	for _, k := range []string{"a", "b", "c", "a", "a"} {
		use(k)
	}
	if use("a") {
		t.Fatal("a has a third token")
	}
	use("d") // evicts b, the least recently used
	if l.Len() != 3 {
		t.Fatalf("Len = %d, want 3", l.Len())
	}
	if use("a") {
		t.Fatal("a was evicted although recently used")
	}
	if !use("b") || !use("b") || use("b") {
		t.Fatal("b came back without a full bucket")
	}
	if l.Len() != 3 {
		t.Fatalf("Len = %d, want 3", l.Len())
	}
}

// TestIdleBucketsAreRecycled: a bucket that is full again is the first to
// go, so a table below its cap does not grow with keys seen once.
func TestIdleBucketsAreRecycled(t *testing.T) {
	l := mustNew(t, Config{RequestsPerSecond: 10, Burst: 5, MaxKeys: 100})
	for i := range 50 {
		// Each key is used once, 500 ms after the previous one: the
		// previous bucket (one token short) is full again by then.
		l.Allow(StringKey(strconv.Itoa(i)), t0.Add(time.Duration(i)*500*time.Millisecond))
	}
	if n := l.Len(); n != 1 {
		t.Fatalf("Len = %d, want 1", n)
	}
	for i := range 50 { // all at once: none is full again
		l.Allow(StringKey("x"+strconv.Itoa(i)), t0.Add(time.Hour))
	}
	if n := l.Len(); n != 50 {
		t.Fatalf("Len = %d, want 50", n)
	}
}

// TestR07MillionKeysStayBounded: a million distinct client addresses, and
// then 100,000 distinct kilobyte-long header values, keep the table at its
// cap and the heap bounded.
func TestR07MillionKeysStayBounded(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	l := mustNew(t, Config{RequestsPerSecond: 50, Burst: 10})
	before := heap()
	for i := range 1_000_000 {
		a := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 12: byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)})
		ok, _ := l.Allow(AddrKey(a), t0)
		if !ok {
			t.Fatalf("key %d: a new key has no token", i)
		}
		if i%100_000 == 0 && l.Len() > DefaultMaxKeys {
			t.Fatalf("after %d keys Len = %d > %d", i+1, l.Len(), DefaultMaxKeys)
		}
	}
	if n := l.Len(); n != DefaultMaxKeys {
		t.Fatalf("Len = %d, want the cap %d", n, DefaultMaxKeys)
	}
	grown := heap() - min(heap(), before)
	const bound = 32 << 20 // about 21 MiB expected at the cap (package doc)
	if grown > bound {
		t.Fatalf("heap grew by %d MiB for %d buckets (bound %d MiB)", grown>>20, DefaultMaxKeys, bound>>20)
	}
	t.Logf("heap: +%.1f MiB for %d buckets (%d bytes each)", float64(grown)/(1<<20), l.Len(), grown/uint64(l.Len()))

	hl := mustNew(t, Config{RequestsPerSecond: 50, Burst: 10, Key: "header:X-Api-Key", MaxKeys: 1000})
	before = heap()
	value := make([]byte, 1024)
	for i := range 100_000 {
		copy(value, strconv.Itoa(i))
		r := &http.Request{Header: http.Header{"X-Api-Key": {string(value)}}}
		hl.Allow(hl.Key(r, ""), t0)
	}
	if n := hl.Len(); n != 1000 {
		t.Fatalf("header table Len = %d, want 1000", n)
	}
	if grown := heap() - min(heap(), before); grown > 4<<20 {
		t.Fatalf("header values kept: heap grew by %d KiB for 1000 buckets", grown>>10)
	}
	runtime.KeepAlive(l)
	runtime.KeepAlive(hl)
}

// TestConcurrentAllow: many goroutines on a few keys get exactly the
// burst (the clock does not move), and the race detector sees no race.
func TestConcurrentAllow(t *testing.T) {
	l := mustNew(t, Config{RequestsPerSecond: 1, Burst: 100, MaxKeys: 2048})
	var mu sync.Mutex
	admitted := map[string]int{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				key := strconv.Itoa((g + i) % 4)
				if ok, _ := l.Allow(StringKey(key), t0); ok {
					mu.Lock()
					admitted[key]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for k, n := range admitted {
		if n != 100 {
			t.Errorf("key %s: %d admitted, want the burst 100", k, n)
		}
	}
	if len(admitted) != 4 {
		t.Errorf("admitted = %v", admitted)
	}
}

func TestAllowDoesNotAllocate(t *testing.T) {
	r := &http.Request{RemoteAddr: "192.0.2.1:443", Header: http.Header{"X-Api-Key": {"k"}}}
	for _, key := range []string{"client_ip", "header:X-Api-Key", "route"} {
		l := mustNew(t, Config{RequestsPerSecond: MaxRequestsPerSecond, Burst: 1 << 30, Key: key})
		now := t0
		l.Allow(l.Key(r, "route-1"), now)
		if n := testing.AllocsPerRun(1000, func() { l.Allow(l.Key(r, "route-1"), now) }); n != 0 {
			t.Errorf("%s: %v allocations per allowed request", key, n)
		}
	}
}

// Package ratelimit is the gateway's request rate limit: one token bucket
// (golang.org/x/time/rate) per key, in a table of bounded size.
//
// A Limiter is one `rate_limit { requests_per_second, burst, key }` block of
// a listener or an upstream (interface.md). The handler asks it for the
// request's Key, then calls Allow; Allow takes a token or says how long the
// client should wait (the 429's Retry-After, RFC 6585 §4). The policy knows
// nothing of responses, metrics or the network: it is table-tested with a
// clock of its own (practice 9, "Small policies").
//
// Memory is bounded: a Limiter holds at most Config.MaxKeys buckets (default
// DefaultMaxKeys), in least-recently-used order. A new key takes the place of
// the least recently used bucket when that one is full again (idle for
// Burst/RequestsPerSecond or more: dropping it loses nothing), or when the
// table is at its cap (the dropped key starts again with a full bucket if it
// returns). Header values are kept as 64-bit hashes, never as strings, so a
// bucket costs the same whatever the client sends: about 340 bytes with its
// share of the map (TestR07MillionKeysStayBounded logs it), some 21 MiB for
// a full table of 65,536 keys.
package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/time/rate"
)

// Key forms of Config.Key.
const (
	// KeyClientIP is the client's address (the peer of the TCP or QUIC
	// connection, without port; an IPv4-mapped IPv6 address as IPv4). It
	// is the default.
	KeyClientIP = "client_ip"
	// KeyRoute is the matched route: one bucket per route, shared by every
	// client.
	KeyRoute = "route"
	// KeyHeaderPrefix starts "header:NAME": the first value of request
	// header NAME. Requests without it (or with an empty value) share one
	// bucket, so leaving the header out never escapes the limit.
	KeyHeaderPrefix = "header:"
)

// DefaultMaxKeys is the default cap on the buckets of one Limiter.
const DefaultMaxKeys = 65536

// MaxRequestsPerSecond bounds Config.RequestsPerSecond: far beyond what one
// gateway serves, and safe in the duration arithmetic.
const MaxRequestsPerSecond = 1e9

// ErrConfig is wrapped by the errors of Config.Normalize and New.
var ErrConfig = errors.New("ratelimit: invalid rate_limit")

// Config is one rate_limit block.
type Config struct {
	// RequestsPerSecond is the rate at which a bucket refills, in requests
	// per second: > 0, at most MaxRequestsPerSecond; fractions are allowed
	// (0.5: one request every two seconds).
	RequestsPerSecond float64
	// Burst is the bucket's size, the requests a key may make at once
	// after being idle: ≥ 1. 0 means the default, one second's worth:
	// ceil(RequestsPerSecond), at least 1.
	Burst int
	// Key selects the bucket of a request: KeyClientIP ("" means it),
	// "header:NAME" (NAME an RFC 9110 token, not Host) or KeyRoute.
	Key string
	// MaxKeys caps the buckets held, ≥ 1; 0 means DefaultMaxKeys. Above
	// 1,024 it is rounded down to a multiple of the table's 16 shards.
	MaxKeys int
}

// Normalize returns c with its defaults filled in (Burst, Key, MaxKeys) and
// the header name canonical, or an error wrapping ErrConfig: a rate that is
// not > 0 or is over MaxRequestsPerSecond, a negative Burst or MaxKeys, a key
// of unknown form. Two configurations that normalize alike limit alike.
func (c Config) Normalize() (Config, error) {
	if !(c.RequestsPerSecond > 0) || c.RequestsPerSecond > MaxRequestsPerSecond || math.IsInf(c.RequestsPerSecond, 0) {
		return c, fmt.Errorf("%w: requests_per_second %v must be greater than 0 and at most %g", ErrConfig, c.RequestsPerSecond, float64(MaxRequestsPerSecond))
	}
	switch {
	case c.Burst < 0:
		return c, fmt.Errorf("%w: burst %d must be at least 1", ErrConfig, c.Burst)
	case c.Burst == 0:
		c.Burst = DefaultBurst(c.RequestsPerSecond)
	}
	if c.MaxKeys < 0 {
		return c, fmt.Errorf("%w: max keys %d must be at least 1", ErrConfig, c.MaxKeys)
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxKeys > shardedAbove {
		c.MaxKeys -= c.MaxKeys % shards
	}
	if c.Key == "" {
		c.Key = KeyClientIP
	}
	if _, name, err := parseKey(c.Key); err != nil {
		return c, err
	} else if name != "" {
		c.Key = KeyHeaderPrefix + name
	}
	return c, nil
}

// DefaultBurst is the burst of a rate_limit without one: one second's worth
// of requests, ceil(rps), at least 1 (and at most math.MaxInt32).
func DefaultBurst(rps float64) int {
	return int(min(max(math.Ceil(rps), 1), math.MaxInt32))
}

// keyKind is a parsed Config.Key.
type keyKind uint8

const (
	kindClientIP keyKind = iota
	kindHeader
	kindRoute
)

// keyForms lists the valid key forms, for messages.
const keyForms = "client_ip, header:NAME or route"

// parseKey checks a key form and returns, for "header:NAME", the canonical
// header name (textproto.CanonicalMIMEHeaderKey). Errors wrap ErrConfig:
// another form, an empty or non-token name, and header:Host (Go keeps Host
// out of the header map; limit by route instead).
func parseKey(s string) (kind keyKind, header string, err error) {
	switch s {
	case KeyClientIP:
		return kindClientIP, "", nil
	case KeyRoute:
		return kindRoute, "", nil
	}
	name, ok := strings.CutPrefix(s, KeyHeaderPrefix)
	switch {
	case !ok:
		return 0, "", fmt.Errorf("%w: key %q is not one of %s", ErrConfig, s, keyForms)
	case !isToken(name):
		return 0, "", fmt.Errorf("%w: key %q: header name %q is not a valid token", ErrConfig, s, name)
	}
	name = textproto.CanonicalMIMEHeaderKey(name)
	if name == "Host" {
		return 0, "", fmt.Errorf("%w: key %q: the Host header is not kept in the header map; use route", ErrConfig, s)
	}
	return kindHeader, name, nil
}

// isToken reports whether s is an RFC 9110 token (§5.6.2).
func isToken(s string) bool { return httpguts.ValidHeaderFieldName(s) }

// Limiter is one rate limit: a bounded table of token buckets by Key. It is
// safe for concurrent use; Allow on a known key neither allocates nor waits
// on anything but its shard's lock.
type Limiter struct {
	cfg    Config // normalized
	kind   keyKind
	header string // canonical name, kindHeader
	limit  rate.Limit
	shards []shard
	mask   uint64
}

// shards is the number of independently locked parts of a table above
// shardedAbove keys; smaller tables have one, so that MaxKeys is exact.
const (
	shards       = 16
	shardedAbove = 1024
)

// New builds a Limiter for cfg (see Config.Normalize for the errors).
func New(cfg Config) (*Limiter, error) {
	c, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	kind, header, _ := parseKey(c.Key)
	n := 1
	if c.MaxKeys > shardedAbove {
		n = shards
	}
	l := &Limiter{cfg: c, kind: kind, header: header, limit: rate.Limit(c.RequestsPerSecond),
		shards: make([]shard, n), mask: uint64(n - 1)}
	for i := range l.shards {
		l.shards[i].init(c.MaxKeys / n)
	}
	return l, nil
}

// Config is the normalized configuration of l: a reload keeps l (and its
// buckets) when the new block normalizes to the same value.
func (l *Limiter) Config() Config { return l.cfg }

// Allow takes one token from key's bucket at now and reports true, or
// reports false with the time until a token will be there: the delay a
// reservation would get (x/time/rate's own arithmetic), > 0. A refused
// request takes nothing, so it never delays the key's next one.
func (l *Limiter) Allow(key Key, now time.Time) (ok bool, retryAfter time.Duration) {
	s := &l.shards[key.h&l.mask]
	s.mu.Lock()
	b := s.bucket(key, now, l)
	ok = b.AllowN(now, 1)
	if !ok {
		retryAfter = max(l.delay(b.TokensAt(now)), time.Nanosecond)
	}
	s.mu.Unlock()
	return ok, retryAfter
}

// delay is the time until a bucket holding tokens holds one.
func (l *Limiter) delay(tokens float64) time.Duration {
	return time.Duration(math.Ceil((1 - tokens) / float64(l.limit) * float64(time.Second)))
}

// Len is the number of buckets held, at most Config().MaxKeys.
func (l *Limiter) Len() int {
	n := 0
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		n += len(s.index)
		s.mu.Unlock()
	}
	return n
}

// newBucket is a full bucket.
func (l *Limiter) newBucket() *rate.Limiter { return rate.NewLimiter(l.limit, l.cfg.Burst) }

// full reports whether b holds its whole burst at now.
func (l *Limiter) full(b *rate.Limiter, now time.Time) bool {
	return b.TokensAt(now) >= float64(l.cfg.Burst)
}

// shard is one locked part of a Limiter's table: a map to entries that
// are also on a list, most recently used first.
type shard struct {
	mu    sync.Mutex
	index map[Key]*entry
	lru   entry // sentinel: lru.next is the most recently used, lru.prev the least
	cap   int
}

// entry is one key's bucket.
type entry struct {
	key        Key
	bucket     *rate.Limiter
	prev, next *entry
}

func (s *shard) init(capacity int) {
	s.cap = max(capacity, 1)
	s.index = make(map[Key]*entry)
	s.lru.prev, s.lru.next = &s.lru, &s.lru
}

// bucket is key's bucket, created (or recycled from the least recently
// used entry) if needed, and marked as the most recently used. s.mu is
// held.
func (s *shard) bucket(key Key, now time.Time, l *Limiter) *rate.Limiter {
	e := s.index[key]
	switch {
	case e != nil:
		s.unlink(e)
	case len(s.index) > 0 && (len(s.index) >= s.cap || l.full(s.lru.prev.bucket, now)):
		// Reuse the least recently used entry: at the cap always, below it
		// when its bucket is full again (a fresh one would be the same).
		e = s.lru.prev
		s.unlink(e)
		delete(s.index, e.key)
		if !l.full(e.bucket, now) {
			e.bucket = l.newBucket()
		}
		e.key = key
		s.index[key] = e
	default:
		e = &entry{key: key, bucket: l.newBucket()}
		s.index[key] = e
	}
	e.prev, e.next = &s.lru, s.lru.next
	s.lru.next.prev = e
	s.lru.next = e
	return e.bucket
}

func (s *shard) unlink(e *entry) {
	e.prev.next = e.next
	e.next.prev = e.prev
}

package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/jwks"
)

// The key set of a jwks_url: fetched over HTTPS, kept, refreshed while the
// route gets requests, refetched for a kid it does not hold, and kept
// through an outage for a bounded time. No goroutine runs between fetches:
// a request that finds the set due for a refresh starts one in the
// background and is verified with the set at hand (stale while
// revalidating); only a request that finds no usable set waits for a
// fetch. The defaults, and why:
const (
	// JWKSRefresh: a set is refreshed 5 minutes after it was fetched,
	// unless its answer's Cache-Control max-age says otherwise (bounded by
	// JWKSMinRefresh and JWKSMaxRefresh). Identity providers publish a new
	// key well before they sign with it, and a kid the set lacks is
	// refetched at once, so the interval bounds how long a key the provider
	// withdrew keeps verifying: minutes (Envoy's remote_jwks: 10 min).
	JWKSRefresh = 5 * time.Minute
	// JWKSMinRefresh and JWKSMaxRefresh bound a max-age: "max-age=0" or
	// "no-store" would refetch on every request, and a day-long max-age
	// (Google publishes hours) would keep a withdrawn key a day.
	JWKSMinRefresh = time.Minute
	JWKSMaxRefresh = time.Hour
	// JWKSMinFetchInterval: at most one fetch starts per 10 seconds per
	// set, whatever asks for it (a refresh, a kid the set lacks, a retry
	// after a failure): a flood of tokens with made-up kids costs the
	// provider one request per 10 s, never a refetch storm.
	JWKSMinFetchInterval = 10 * time.Second
	// JWKSStaleAfter: through an outage of the provider the last set
	// fetched keeps verifying for 24 hours after its fetch, long enough to
	// ride out a night's incident; after that tokens are refused with 503
	// auth_unavailable (fail closed) until a fetch succeeds: a set nobody
	// could confirm for a day may hold a key the provider withdrew.
	JWKSStaleAfter = 24 * time.Hour
	// JWKSFetchTimeout bounds one fetch, connection, TLS and body
	// included; a request waiting for a fetch waits at most this long.
	JWKSFetchTimeout = 5 * time.Second
)

// RemoteKeys is the key set of one jwks_url, shared by the routes that
// name it the same way and kept across reloads that leave it unchanged
// (Same), with its own HTTP transport. Close stops it.
type RemoteKeys struct {
	url     string
	algs    []string
	roots   *x509.CertPool
	now     func() time.Time
	onFetch func(FetchReport)
	client  *http.Client
	tr      *http.Transport
	ctx     context.Context
	cancel  context.CancelFunc

	mu        sync.Mutex
	set       *jwks.Set     // the last good set; nil before the first
	carried   bool          // set is a replaced source's (Carry), not fetched here yet
	fetchedAt time.Time     // when set was last fetched (or confirmed)
	refreshAt time.Time     // when a request starts the next fetch
	lastStart time.Time     // when the last fetch started
	inflight  chan struct{} // closed when the running fetch ends; nil: none
	fetches   int           // started so far
	lastErr   error         // of the last fetch
}

// KeysState is what a RemoteKeys verifies with.
type KeysState struct {
	// URL is the jwks_url.
	URL string
	// Usable: a set verifies tokens now. Carried: that set is the one of
	// the source a reload replaced (Carry), this one has not fetched yet.
	Usable, Carried bool
	// FetchedAt is when the set was last fetched, by this source or the
	// one it was carried from; StaleAt when it stops verifying
	// (FetchedAt + JWKSStaleAfter) unless a fetch succeeds. Both zero
	// without a set.
	FetchedAt, StaleAt time.Time
	// LastErr is the error of the last fetch that ended (nil: it
	// succeeded, or none ended yet).
	LastErr error
}

// FetchReport is the outcome of one fetch, for onFetch: Err (nil: a
// usable set was fetched) and the state after it. ReplacedCarried: the
// fetch succeeded where the set verifying was a carried one.
type FetchReport struct {
	KeysState
	Err             error
	ReplacedCarried bool
}

// NewRemoteKeys makes the key set of c.JWKSURL (an https URL; c.JWKSRoots
// the CAs its certificate must chain to, nil for the system's) for
// c.Algorithms, and starts its first fetch. onFetch, when not nil, is
// called after each fetch with its outcome. Errors: a URL that is not
// https with a host.
func NewRemoteKeys(c JWTConfig, onFetch func(FetchReport)) (*RemoteKeys, error) {
	return newRemoteKeys(c, onFetch, nil)
}

// newRemoteKeys is NewRemoteKeys, carrying carry's set (Carry) before the
// first fetch starts.
func newRemoteKeys(c JWTConfig, onFetch func(FetchReport), carry *RemoteKeys) (*RemoteKeys, error) {
	if err := CheckJWKSURL(c.JWKSURL); err != nil {
		return nil, fmt.Errorf("auth: jwt jwks_url: %w", err)
	}
	tr := &http.Transport{
		Proxy:                  http.ProxyFromEnvironment, // HTTPS_PROXY, for providers on the Internet; TLS is end to end
		DialContext:            (&net.Dialer{Timeout: JWKSFetchTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:        &tls.Config{RootCAs: c.JWKSRoots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    JWKSFetchTimeout,
		MaxIdleConns:           1,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		ForceAttemptHTTP2:      true,
	}
	r := &RemoteKeys{url: c.JWKSURL, algs: slices.Clone(c.algorithms()), roots: c.JWKSRoots, now: c.clock(), onFetch: onFetch, tr: tr,
		client: &http.Client{Transport: tr, Timeout: JWKSFetchTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return errors.New("redirects are not followed") }}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.carry(carry)
	r.mu.Lock()
	r.startLocked(r.now())
	r.mu.Unlock()
	return r, nil
}

// carry gives r, without a set yet, old's set while it still verifies:
// the set of the source a reload replaces (another jwks_url or
// jwks_ca_file for the same issuer). It verifies until r's first
// successful fetch replaces it, at most until JWKSStaleAfter after it
// was fetched (its fetch time is kept), as through an outage of the
// provider: a new source that cannot be fetched (a wrong CA, a mistyped
// URL) degrades like an outage, not at once to 503 auth_unavailable.
// Reports whether r took a set.
func (r *RemoteKeys) carry(old *RemoteKeys) bool {
	if old == nil || old == r {
		return false
	}
	old.mu.Lock()
	set, at := old.set, old.fetchedAt
	old.mu.Unlock()
	if set == nil || r.now().Sub(at) >= JWKSStaleAfter {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.set != nil || r.ctx.Err() != nil {
		return false
	}
	r.set, r.fetchedAt, r.carried = set, at, true
	return true
}

// State is what r verifies with now.
func (r *RemoteKeys) State() KeysState {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked(now)
}

func (r *RemoteKeys) stateLocked(now time.Time) KeysState {
	s := KeysState{URL: r.url, Usable: r.usableLocked(now), LastErr: r.lastErr}
	if r.set != nil {
		s.Carried, s.FetchedAt, s.StaleAt = r.carried, r.fetchedAt, r.fetchedAt.Add(JWKSStaleAfter)
	}
	return s
}

// CheckJWKSURL says why s is not a jwks_url (an absolute https URL with a
// host, without user info or fragment), or nil. Plain http is refused: the
// keys decide who gets in, and whoever could change them on the way could
// sign any token (a local set is a jwks_file).
func CheckJWKSURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New("not a URL")
	case u.Scheme != "https":
		return fmt.Errorf("the scheme must be https, got %q: keys fetched in clear could be replaced on the way (use jwks_file for a local set)", u.Scheme)
	case u.Host == "":
		return errors.New("no host")
	case u.User != nil:
		return errors.New("user info is not allowed")
	case strings.Contains(s, "#"):
		return errors.New("a fragment is not allowed")
	}
	return nil
}

// Same reports whether r fetches the set c describes the same way (a
// reload keeps r, its set and its connection then).
func (r *RemoteKeys) Same(c JWTConfig) bool {
	if r == nil || r.url != c.JWKSURL || !slices.Equal(r.algs, c.algorithms()) {
		return false
	}
	if r.roots == nil || c.JWKSRoots == nil {
		return r.roots == c.JWKSRoots
	}
	return r.roots.Equal(c.JWKSRoots)
}

// Close stops r: a fetch running is canceled, no other starts, and the
// set is no longer usable.
func (r *RemoteKeys) Close() {
	r.cancel()
	r.tr.CloseIdleConnections()
}

// current is the set to verify with: the last good one while it is less
// than JWKSStaleAfter old (starting a refresh when it is due), else the
// outcome of a fetch (ResultUnavailable when it failed or may not start
// yet, ResultCanceled when ctx ended first).
func (r *RemoteKeys) current(ctx context.Context) (*jwks.Set, string) {
	now := r.now()
	r.mu.Lock()
	if !now.Before(r.refreshAt) {
		r.startLocked(now)
	}
	if r.usableLocked(now) {
		s := r.set
		r.mu.Unlock()
		return s, ResultOK
	}
	return r.waitLocked(ctx)
}

// refetch is the set after a fetch for a kid that seen (the set the
// caller looked in) lacks: another set when one arrived meanwhile, else
// the outcome of a fetch started now, or of the one running. When the last
// fetch started less than JWKSMinFetchInterval ago it is seen, at once.
func (r *RemoteKeys) refetch(ctx context.Context, seen *jwks.Set) (*jwks.Set, string) {
	now := r.now()
	r.mu.Lock()
	if r.set != seen && r.usableLocked(now) {
		s := r.set
		r.mu.Unlock()
		return s, ResultOK
	}
	if r.inflight == nil && !r.startLocked(now) {
		r.mu.Unlock()
		return seen, ResultOK
	}
	return r.waitLocked(ctx)
}

// waitLocked waits, r.mu held on entry and released, for the running
// fetch (if any) and returns the usable set then.
func (r *RemoteKeys) waitLocked(ctx context.Context) (*jwks.Set, string) {
	ch := r.inflight
	r.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ResultCanceled
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.usableLocked(r.now()) {
		return r.set, ResultOK
	}
	return nil, ResultUnavailable
}

func (r *RemoteKeys) usableLocked(now time.Time) bool {
	return r.set != nil && r.ctx.Err() == nil && now.Sub(r.fetchedAt) < JWKSStaleAfter
}

// startLocked starts a fetch unless one runs, one started less than
// JWKSMinFetchInterval ago, or r is closed; true when one runs after.
func (r *RemoteKeys) startLocked(now time.Time) bool {
	if r.inflight != nil {
		return true
	}
	if r.ctx.Err() != nil || r.fetches > 0 && now.Sub(r.lastStart) < JWKSMinFetchInterval {
		return false
	}
	r.lastStart = now
	r.fetches++
	ch := make(chan struct{})
	r.inflight = ch
	go r.fetch(ch)
	return true
}

// fetch gets the set once and records the outcome: a usable set replaces
// the last one (kept as is when its document did not change; a carried
// one always) and sets the next refresh; a failure keeps the last set,
// and the next request after JWKSMinFetchInterval tries again (a carried
// set is never due for a refresh: every request may start one).
func (r *RemoteKeys) fetch(done chan struct{}) {
	s, maxAge, err := r.get()
	now := r.now()
	r.mu.Lock()
	r.lastErr = err
	replaced := false
	if err == nil {
		if r.set == nil || r.carried || r.set.Digest != s.Digest {
			r.set = s
		}
		replaced, r.carried = r.carried, false
		r.fetchedAt, r.refreshAt = now, now.Add(maxAge)
	}
	report := FetchReport{KeysState: r.stateLocked(now), Err: err, ReplacedCarried: replaced}
	r.inflight = nil
	close(done)
	r.mu.Unlock()
	if r.onFetch != nil && r.ctx.Err() == nil {
		r.onFetch(report)
	}
}

// get fetches and parses the set; maxAge is when to refresh it.
func (r *RemoteKeys) get() (*jwks.Set, time.Duration, error) {
	ctx, cancel := context.WithTimeout(r.ctx, JWKSFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header["Accept"] = []string{"application/jwk-set+json, application/json"}
	req.Header["User-Agent"] = []string{"impulse-agent-jwks"}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, jwks.MaxBytes+1))
	if err != nil {
		return nil, 0, err
	}
	s, err := jwks.Parse(body, r.algs)
	if err == nil && s.Len() == 0 {
		err = jwks.ErrNoUsableKey
	}
	if err != nil {
		return nil, 0, err
	}
	return s, refreshAfter(resp.Header["Cache-Control"]), nil
}

// refreshAfter is when to refresh a set whose answer had the Cache-Control
// values cc (RFC 9111 §5.2.2): its max-age within [JWKSMinRefresh,
// JWKSMaxRefresh], JWKSMinRefresh for no-cache or no-store, JWKSRefresh
// without either.
func refreshAfter(cc []string) time.Duration {
	d := time.Duration(-1)
	for _, v := range cc {
		for _, dir := range strings.Split(v, ",") {
			name, val, _ := strings.Cut(strings.TrimSpace(dir), "=")
			switch strings.ToLower(name) {
			case "no-cache", "no-store":
				return JWKSMinRefresh
			case "max-age":
				if n, err := strconv.ParseInt(strings.Trim(val, `"`), 10, 64); err == nil && n >= 0 {
					d = time.Duration(min(n, int64(JWKSMaxRefresh/time.Second))) * time.Second
				}
			}
		}
	}
	if d < 0 {
		return JWKSRefresh
	}
	return min(max(d, JWKSMinRefresh), JWKSMaxRefresh)
}

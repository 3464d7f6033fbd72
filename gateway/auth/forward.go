package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Forward auth: every request of the route is first described to an HTTP
// service by a GET of its address without a body, carrying the request's
// method, URI, host, scheme and client address as Traefik's ForwardAuth
// sends them (X-Forwarded-Method, X-Forwarded-Uri, X-Forwarded-Host,
// X-Forwarded-Proto, X-Forwarded-For) and the fields of
// CopyRequestHeaders. The URI is the normalized path the route matched
// and the query as sent (never the target as sent: "/a/public/../secret"
// would pass a service allowing "/a/public/" by prefix, and reach the
// backend as "/a/secret"). A 2xx lets the request go on with the fields of
// CopyResponseHeaders set on it (the client's own removed in every
// spelling; none its Connection names, RFC 9110 §7.6.1); any other status is the client's answer,
// as the service sent it (its body at most MaxDenialBytes); no answer
// within the timeout, or a failed connection, refuses the request
// (ResultUnavailable: the pipeline's 503 auth_unavailable). Redirects are
// relayed, never followed.

// MaxDenialBytes bounds the body of a refusal relayed to the client: 64
// KiB. A longer one is not relayed: the request is refused as
// ResultUnavailable (a misbehaving auth service must not make the gateway
// buffer without bound).
const MaxDenialBytes = 64 << 10

// maxAuthHeaderBytes bounds the auth service's response header section.
const maxAuthHeaderBytes = 64 << 10

// Denial is an auth service's refusal, to relay to the client as sent
// (hop-by-hop fields and Content-Length removed).
type Denial struct {
	Status int
	Header http.Header
	Body   []byte
}

// Forward asks one auth service. It owns a dedicated HTTP transport (at
// most 16 idle connections, idle for at most 30 s); Close releases them,
// also those of checks still running when it is called.
type Forward struct {
	cfg      ForwardConfig
	key      string // identity of cfg (Same)
	client   *http.Client
	tr       *http.Transport
	copyReq  []string // canonical
	copyResp []string // canonical
	inflight atomic.Int64
	closed   atomic.Bool
}

// NewForward makes the Forward of c. Errors: an address that is not an
// absolute http or https URL without a fragment, a timeout ≤ 0.
func NewForward(c ForwardConfig) (*Forward, error) {
	if err := CheckAddress(c.Address); err != nil {
		return nil, fmt.Errorf("auth: forward_auth address: %w", err)
	}
	if c.Timeout <= 0 {
		return nil, fmt.Errorf("auth: forward_auth timeout must be > 0, got %v", c.Timeout)
	}
	tr := &http.Transport{
		Proxy:                  nil, // the auth service is dialled directly, whatever HTTP_PROXY says
		DialContext:            (&net.Dialer{Timeout: c.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:    c.Timeout,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    16,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: maxAuthHeaderBytes,
		DisableCompression:     true, // a denial's body is relayed as sent
		ForceAttemptHTTP2:      true,
	}
	f := &Forward{cfg: c, tr: tr, key: forwardKey(c),
		client: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	for _, h := range c.CopyRequestHeaders {
		f.copyReq = append(f.copyReq, textproto.CanonicalMIMEHeaderKey(h))
	}
	for _, h := range c.CopyResponseHeaders {
		f.copyResp = append(f.copyResp, textproto.CanonicalMIMEHeaderKey(h))
	}
	return f, nil
}

// CheckAddress says why s is not a forward_auth address (an absolute
// http or https URL with a host, no user info, no fragment), or nil.
func CheckAddress(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL: %v", err.(*url.Error).Err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("the scheme must be http or https, got %q", u.Scheme)
	case u.Host == "":
		return errors.New("no host")
	case u.User != nil:
		return errors.New("user info is not allowed (send credentials with copy_request_headers)")
	case u.Fragment != "" || u.RawFragment != "":
		return errors.New("a fragment is not allowed")
	}
	return nil
}

func forwardKey(c ForwardConfig) string {
	return fmt.Sprintf("%q|%q|%q|%d", c.Address, c.CopyRequestHeaders, c.CopyResponseHeaders, c.Timeout)
}

// Same reports whether f asks the service c describes, the same way (a
// reload keeps f, and its connections, then).
func (f *Forward) Same(c ForwardConfig) bool { return f != nil && f.key == forwardKey(c) }

// Close releases f's connections: idle ones at once, those of checks still
// running when they end. A check after Close still works, then releases
// its connection.
func (f *Forward) Close() {
	f.closed.Store(true)
	f.tr.CloseIdleConnections()
}

// check asks the auth service about r, whose target is uri (the
// normalized path and the query: Policy.Authenticate): ResultOK (the
// copied fields set on r), ResultDenied with the answer to relay,
// ResultUnavailable, or ResultCanceled when ctx ended first (the client
// left).
func (f *Forward) check(ctx context.Context, r *http.Request, uri string) (string, *Denial) {
	f.inflight.Add(1)
	defer func() {
		if f.inflight.Add(-1) == 0 && f.closed.Load() {
			f.tr.CloseIdleConnections()
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, f.cfg.Address, nil)
	if err != nil {
		return ResultUnavailable, nil
	}
	for _, name := range f.copyReq {
		if v := r.Header[name]; len(v) > 0 {
			req.Header[name] = slices.Clone(v)
		}
	}
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	if uri == "" {
		uri = r.URL.RequestURI()
	}
	req.Header["X-Forwarded-Method"] = []string{r.Method}
	req.Header["X-Forwarded-Proto"] = []string{proto}
	req.Header["X-Forwarded-Host"] = []string{r.Host}
	req.Header["X-Forwarded-Uri"] = []string{uri}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		req.Header["X-Forwarded-For"] = []string{host}
	}
	req.Header["User-Agent"] = []string{"impulse-agent-forward-auth"}
	resp, err := f.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ResultCanceled, nil
		}
		return ResultUnavailable, nil
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, MaxDenialBytes)) // reuse the connection
		conn := connectionFields(resp.Header)
		for _, name := range f.copyResp {
			deleteSpellings(r.Header, name) // the client's own, never believed
			if v := resp.Header[name]; len(v) > 0 && !conn[name] {
				r.Header[name] = slices.Clone(v)
			}
		}
		return ResultOK, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxDenialBytes+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return ResultCanceled, nil
	case err != nil, len(body) > MaxDenialBytes:
		return ResultUnavailable, nil
	}
	h := resp.Header.Clone()
	for name := range connectionFields(resp.Header) {
		delete(h, name)
	}
	for _, name := range hopByHop {
		delete(h, name)
	}
	delete(h, "Content-Length")
	return ResultDenied, &Denial{Status: resp.StatusCode, Header: h, Body: body}
}

// hopByHop are the fields never relayed (RFC 9110 §7.6.1).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// connectionFields are the fields h's Connection names (canonical): hop-by-hop
// for the answer they came with (RFC 9110 §7.6.1), so neither copied to
// the request nor relayed; nil when none.
func connectionFields(h http.Header) map[string]bool {
	var out map[string]bool
	for _, v := range h["Connection"] {
		for _, f := range splitTokens(v) {
			if out == nil {
				out = map[string]bool{}
			}
			out[textproto.CanonicalMIMEHeaderKey(f)] = true
		}
	}
	return out
}

func splitTokens(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if t := strings.Trim(s, " \t"); t != "" {
			out = append(out, t)
		}
	}
	return out
}

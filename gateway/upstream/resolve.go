package upstream

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Resolver looks up a hostname's addresses; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// DNS refresh outcomes (RFC-neutral names used in snapshots and metrics).
const (
	DNSChanged   = "changed"   // a different, non-empty address set: clients rotate
	DNSUnchanged = "unchanged" // the same set
	DNSEmpty     = "empty"     // an answer without addresses: last set kept
	DNSFailed    = "failed"    // lookup error or timeout: last set kept
)

// Resolution is a backend's address state, separate from its health and
// membership. For an IP literal it is fixed at creation.
type Resolution struct {
	// Kind is "ip" for an IP literal, "hostname" otherwise.
	Kind string `json:"kind"`
	// Addresses is the last usable set (never replaced by an empty or failed
	// lookup).
	Addresses []netip.Addr `json:"addresses"`
	// LastRefresh is the time of the last lookup and LastSuccess of the last
	// one that returned addresses; Generation counts address-set changes.
	LastRefresh time.Time `json:"last_refresh,omitzero"`
	LastSuccess time.Time `json:"last_success,omitzero"`
	Generation  uint64    `json:"generation"`
	// LastOutcome is one of DNSChanged, DNSUnchanged, DNSEmpty, DNSFailed;
	// LastError the failure text. Rotated tells whether the transport's idle
	// connections were closed after the last change (recorded apart from the
	// DNS outcome).
	LastOutcome string `json:"last_outcome,omitempty"`
	LastError   string `json:"last_error,omitempty"`
	Rotated     bool   `json:"rotated"`
}

// resolver owns one backend's Resolution. Dial reads addrs lock-free.
type resolver struct {
	host  string
	port  uint16
	addrs atomic.Pointer[[]netip.AddrPort]
	next  atomic.Uint32 // rotates the first address tried

	mu    sync.Mutex
	state Resolution
}

func newResolver(host string, port int) *resolver {
	r := &resolver{host: host, port: uint16(port)}
	if ip, err := netip.ParseAddr(host); err == nil {
		r.state = Resolution{Kind: "ip", Addresses: []netip.Addr{ip}, Generation: 1}
		r.addrs.Store(&[]netip.AddrPort{netip.AddrPortFrom(ip, r.port)})
	} else {
		r.state = Resolution{Kind: "hostname"}
		r.addrs.Store(&[]netip.AddrPort{})
	}
	return r
}

// isHostname reports whether periodic refresh applies.
func (r *resolver) isHostname() bool { return r.state.Kind == "hostname" }

// usable reports whether at least one address is known.
func (r *resolver) usable() bool { return len(*r.addrs.Load()) > 0 }

// refresh performs one lookup and classifies it; rotate is called when the
// set changed and a previous set existed.
func (r *resolver) refresh(ctx context.Context, res Resolver, rotate func()) string {
	ips, err := res.LookupNetIP(ctx, "ip", r.host)
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state.LastRefresh = now
	r.state.LastError = ""
	switch {
	case err != nil:
		r.state.LastOutcome, r.state.LastError = DNSFailed, err.Error()
	case len(ips) == 0:
		r.state.LastOutcome = DNSEmpty
	default:
		for i, ip := range ips {
			ips[i] = ip.Unmap()
		}
		slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
		ips = slices.Compact(ips)
		r.state.LastSuccess = now
		if slices.Equal(ips, r.state.Addresses) {
			r.state.LastOutcome = DNSUnchanged
			break
		}
		had := len(r.state.Addresses) > 0
		r.state.Addresses, r.state.LastOutcome = ips, DNSChanged
		r.state.Generation++
		aps := make([]netip.AddrPort, len(ips))
		for i, ip := range ips {
			aps[i] = netip.AddrPortFrom(ip, r.port)
		}
		r.addrs.Store(&aps)
		r.state.Rotated = false
		if had {
			rotate()
			r.state.Rotated = true
		}
	}
	return r.state.LastOutcome
}

// snapshot returns a copy of the resolution state.
func (r *resolver) snapshot() Resolution {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.state
	s.Addresses = slices.Clone(s.Addresses)
	return s
}

// dial connects to one of the resolved addresses, starting at a rotating
// offset and failing over to the next on a connect error.
func (r *resolver) dial(ctx context.Context, d *net.Dialer, network string) (net.Conn, error) {
	aps := *r.addrs.Load()
	if len(aps) == 0 {
		return nil, &net.DNSError{Err: "no usable address resolved yet", Name: r.host, IsNotFound: true}
	}
	start := int(r.next.Add(1))
	var firstErr error
	for i := range aps {
		ap := aps[(start+i)%len(aps)]
		c, err := d.DialContext(ctx, network, ap.String())
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// runRefresh re-resolves every interval (±10% jitter) until ctx is done.
func (r *resolver) runRefresh(ctx context.Context, res Resolver, every time.Duration, rotate func(), report func(string)) {
	for {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		outcome := r.refresh(lctx, res, rotate)
		cancel()
		if ctx.Err() != nil {
			return
		}
		report(outcome)
		j := int64(every) / 10
		t := time.NewTimer(every - time.Duration(j) + time.Duration(rand.Int64N(2*j+1)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

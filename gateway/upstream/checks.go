package upstream

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/transport"
)

// startChecks runs b's DNS refresh (hostname backends) and active checks
// until b is drained or the upstream closes. Callers hold u.mu.
func (u *Upstream) startChecks(b *Backend) {
	if u.cfg.Active == nil && !b.res.isHostname() {
		return
	}
	ctx, cancel := context.WithCancel(u.ctx)
	b.stopChecks = cancel
	if b.res.isHostname() {
		res, every := u.cfg.Resolver, u.cfg.DNSRefresh
		if res == nil {
			res = net.DefaultResolver
		}
		if every <= 0 {
			every = 30 * time.Second
		}
		go b.res.runRefresh(ctx, res, every, b.Transport.CloseIdleConnections, func(outcome string) {
			if outcome != DNSUnchanged {
				u.emit(Event{Backend: b.ID, Kind: "dns_" + outcome})
			}
		})
	}
	if u.cfg.Active != nil {
		go health.RunChecks(ctx, *u.cfg.Active, u.probe(b), b.Health)
	}
}

// probe returns the active check of b: a gRPC health check when
// Active.GRPC (grpccheck.go), otherwise GET path over the backend's own
// protocol (HTTP/1.1, HTTP/2 over TLS or h2c, through b's own transport);
// any 2xx passes. path is a request
// target: a query ("/status?full=1") is sent as one.
func (u *Upstream) probe(b *Backend) health.Probe {
	if u.cfg.Active.GRPC {
		return grpcProbe(b, u.cfg.Active)
	}
	target := &url.URL{Scheme: transport.URLScheme(b.Scheme), Host: b.Addr(), Path: u.cfg.Active.Path}
	if ref, err := url.ParseRequestURI(u.cfg.Active.Path); err == nil {
		target.Path, target.RawPath, target.RawQuery = ref.Path, ref.RawPath, ref.RawQuery
	}
	return func(ctx context.Context) (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
		if err != nil {
			return false, "request: " + err.Error()
		}
		req.Header.Set("User-Agent", "impulse-agent-health-check")
		resp, err := b.Transport.RoundTrip(req)
		if err != nil {
			if ctx.Err() != nil {
				return false, "timeout"
			}
			_, reason := transport.Classify(ctx, err)
			return false, reason
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 299 {
			return false, "status " + strconv.Itoa(resp.StatusCode)
		}
		return true, ""
	}
}

// notifier turns health transitions of one backend into Events and starts
// slow start when it recovers.
func (u *Upstream) notifier(b *Backend) func(health.Transition) {
	return func(t health.Transition) {
		if t.Returned || (t.From == health.Unhealthy && t.To == health.Healthy) {
			b.warmUp()
		}
		e := Event{Backend: b.ID, From: t.From, To: t.To, Reason: t.Reason, Kind: "health"}
		switch {
		case t.Ejected:
			e.Kind = "ejected"
		case t.Returned:
			e.Kind = "returned"
		}
		u.emit(e)
	}
}

func (u *Upstream) emit(e Event) {
	if u.cfg.Events != nil {
		e.Upstream = u.cfg.Name
		u.cfg.Events(e)
	}
}

package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/certs"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/gateway/wire"
)

// The gateway's side of its observers (gateway/observe): the sampled
// gauges, the listeners' TLS settings the request path and the expiry
// gauges read, and the backend lifecycle events.

// Definitions of the gateway's metrics for the Prometheus sink
// (observe.CounterDefinitions and so on).
var (
	CounterDefinitions = observe.CounterDefinitions
	SummaryDefinitions = observe.SummaryDefinitions
	GaugeDefinitions   = observe.GaugeDefinitions
	// UnlabelledMetrics are the counters without labels (the access
	// log's): the series a Prometheus sink creates for their definition
	// is the real one.
	UnlabelledMetrics = observe.UnlabelledMetrics
)

// accessLogFlushWait bounds how long Shutdown waits for the access log to
// write what it holds.
const accessLogFlushWait = 5 * time.Second

// FlushMetrics hands counters aggregated on the request path to go-metrics
// at once; the agent calls it before serving a scrape. They are also flushed
// every second.
func (g *Gateway) FlushMetrics() { g.obs.Metrics.Flush(time.Now(), g.liveUpstream) }

// liveUpstream reports whether the current route table has the upstream.
func (g *Gateway) liveUpstream(name string) bool {
	_, ok := g.table.Load().upstreams[name]
	return ok
}

// ReopenAccessLog opens the access log's file again and writes to it from
// the next line on, losing none: the command line calls it on SIGUSR1,
// after logrotate renamed the file. A no-op while the log is off; for
// stdout and stderr nothing changes. Errors: the file cannot be opened
// (*accesslog.OpenError); the writer keeps the old one.
func (g *Gateway) ReopenAccessLog() error { return g.obs.Access.Reopen() }

// Traffic returns the cumulative response counts of every upstream, by
// name, since the upstream name first appeared in the configuration.
func (g *Gateway) Traffic() map[string]upstream.ResponseCounts { return g.obs.Traffic.Load() }

// sampleUpstreams sets the sampled gauges every interval until ctx is
// done, and flushes the request path's counters. Sampling keeps gauge
// updates off the request path.
func (g *Gateway) sampleUpstreams(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	tick := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		gm := g.obs.Metrics
		now := time.Now()
		gm.Flush(now, g.liveUpstream)
		gm.SampleConns()
		g.sampleTLS(now)
		tbl := g.table.Load()
		if tick++; tick < SampleEvery(len(tbl.upstreams)) {
			continue
		}
		tick = 0
		g.sampleLimits(now)
		for name, u := range tbl.upstreams {
			eligible := 0
			for _, b := range u.Current().Backends {
				if b.Eligible() {
					eligible++
				}
			}
			gm.SampleUpstream(now, name, u.InFlight(), eligible)
		}
		gm.EndSamples()
	}
}

// SampleEvery is in how many ticks of a once-a-second sampler a gauge per
// upstream (or per service) is sampled when there are n: every tick up to
// 1,000, then one more tick per 1,000 (every 5 s at 5,000), at most 10
// (the gauges' touch period, under go-metrics' retention). Walking every
// upstream and backend each second was most of an idle gateway's CPU at
// 5,000 upstreams (test/scale); a scrape every 15 s or more still sees
// values at most a few seconds old.
func SampleEvery(n int) int { return min(10, max(1, (n+999)/1000)) }

// sampleLimits sets the concurrency-limit gauges.
func (g *Gateway) sampleLimits(now time.Time) {
	gm := g.obs.Metrics
	gm.SampleLimit(now, scopeGlobal, "", g.global.InFlight(), g.global.Limits().Max)
	tbl := g.table.Load()
	for name, u := range tbl.upstreams {
		if l := tbl.limiters[name]; l.Limits().Max > 0 {
			gm.SampleLimit(now, scopeUpstream, name, l.InFlight(), l.Limits().Max)
			gm.SampleQueue(now, name, l.Waiting())
		}
		if m := u.MaxRequestsPerBackend(); m > 0 {
			var busiest int64
			for _, b := range u.Current().Backends {
				busiest = max(busiest, b.InFlight())
			}
			gm.SampleLimit(now, scopeBackend, name, busiest, m)
		}
	}
}

// tlsSettings is what the request path and the sampler need of a
// listener's TLS settings beyond its *tls.Config.
type tlsSettings struct {
	forwardClientCert bool
	expiry            map[string]time.Time
}

// setListenerTLS publishes the TLS settings of the listeners now running;
// applyListenersLocked calls it once they are in place.
func (g *Gateway) setListenerTLS(lcs []ListenerConfig) {
	m := make(map[string]tlsSettings, len(lcs))
	for _, lc := range lcs {
		m[lc.Name] = tlsSettings{forwardClientCert: lc.ForwardClientCert, expiry: lc.CertificateExpiry}
	}
	g.tlsSettings.Store(&m)
	g.sampleTLS(time.Now())
}

// withClientCert returns ctx carrying r's X-Forwarded-Client-Cert value
// (wire.WithClientCert) when r's listener forwards client certificates and
// the handshake verified r's (r.TLS.VerifiedChains; net/http and quic-go's
// http3 both set r.TLS); otherwise ctx itself.
//
// A mesh listener always forwards its peer's certificate (its handshake
// verified it: mesh.Inbound.VerifyConnection), with the SPIFFE ID in URI=,
// as Consul's Envoy sidecars do.
func (g *Gateway) withClientCert(ctx context.Context, listener string, r *http.Request) context.Context {
	if r.TLS != nil && g.meshFor(listener) != nil {
		if id, ok := certs.PeerIdentity(r.TLS); ok {
			return wire.WithClientCert(ctx, id.XFCC())
		}
		return ctx
	}
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return ctx
	}
	if m := g.tlsSettings.Load(); m == nil || !(*m)[listener].forwardClientCert {
		return ctx
	}
	id, ok := certs.VerifiedIdentity(r.TLS)
	if !ok {
		return ctx
	}
	return wire.WithClientCert(ctx, id.XFCC())
}

// sampleTLS sets the certificate expiry gauges. A certificate or listener
// that a reload removed keeps its last value until
// telemetry.prometheus_retention drops the series (go-metrics cannot
// delete one).
func (g *Gateway) sampleTLS(now time.Time) {
	m := g.tlsSettings.Load()
	if m == nil {
		return
	}
	for listener, lt := range *m {
		for name, notAfter := range lt.expiry {
			g.obs.Metrics.CertificateExpiry(listener, name, notAfter.Sub(now).Seconds())
		}
	}
	g.sampleMesh(now) // mesh.go
}

// onEvent logs backend lifecycle transitions and counts health changes.
func (g *Gateway) onEvent(e upstream.Event) {
	switch e.Kind {
	case "added", "removed":
		g.log.Debug("backend "+e.Kind, "upstream", e.Upstream, "backend", e.Backend)
		return
	case "health":
		g.log.Info("backend health changed", "upstream", e.Upstream, "backend", e.Backend, "from", e.From.String(), "to", e.To.String(), "reason", e.Reason)
	case "ejected":
		g.log.Warn("backend ejected", "upstream", e.Upstream, "backend", e.Backend, "reason", e.Reason)
	case "returned":
		g.log.Info("backend returned from ejection", "upstream", e.Upstream, "backend", e.Backend)
	case "dns_changed":
		g.log.Info("backend addresses changed; idle connections rotated", "upstream", e.Upstream, "backend", e.Backend)
	case "dns_empty", "dns_failed":
		g.log.Warn("backend DNS refresh kept the last usable addresses", "upstream", e.Upstream, "backend", e.Backend, "outcome", e.Kind)
	}
	g.obs.Metrics.HealthTransition(e.Upstream, e.Kind, e.To.String())
}

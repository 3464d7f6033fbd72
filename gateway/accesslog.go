package gateway

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
)

// The access log (Config.AccessLog): record hands every request's outcome
// to it, the same values the request metrics get, so the two always agree
// on a status. A tunnel's line is written when it closes.

// Access log metric keys: lines lost, by cause.
var (
	metricAccessLogDropped = []string{"access_log", "dropped"}
	metricAccessLogErrors  = []string{"access_log", "errors"}
)

// UnlabelledMetrics are the counters of CounterDefinitions that have no
// labels (the access log's): the series a Prometheus sink creates for
// their definition is the real one.
var UnlabelledMetrics = [][]string{metricAccessLogDropped, metricAccessLogErrors}

// accessLogFlushWait bounds how long Shutdown waits for the access log to
// write what it holds.
const accessLogFlushWait = 5 * time.Second

// accessLog owns the running access log: nil while off.
type accessLog struct {
	cur atomic.Pointer[accesslog.Log]
	// retired are logs a reload turned off, still writing what they
	// hold; Shutdown waits for them. g.mu guards it.
	retired []*accesslog.Log
}

// accessLogCounts are the access log's counters, carried over every Log
// the gateway runs, and the part of them go-metrics has (flushMu guards
// flushed and touched).
type accessLogCounts struct {
	stats                         accesslog.Stats
	flushedDropped, flushedErrors uint64
	touched                       time.Time
}

// flushAccessLog hands the counts since the last flush to go-metrics:
// impulse_access_log_dropped (the buffer was full) and
// impulse_access_log_errors (a write failed). flushMu is held.
func (gm *gatewayMetrics) flushAccessLog(now time.Time) {
	a := &gm.accessLog
	dropped, errs := a.stats.Dropped.Load(), a.stats.Errors.Load()
	if dropped == a.flushedDropped && errs == a.flushedErrors && now.Sub(a.touched) < touchEvery {
		return
	}
	gm.m.IncrCounterWithLabels(metricAccessLogDropped, float32(dropped-a.flushedDropped), nil)
	gm.m.IncrCounterWithLabels(metricAccessLogErrors, float32(errs-a.flushedErrors), nil)
	a.flushedDropped, a.flushedErrors, a.touched = dropped, errs, now
}

// startAccessLog starts the access log of New's configuration (nil: off).
func (g *Gateway) startAccessLog(cfg *accesslog.Config) error {
	if cfg == nil {
		return nil
	}
	out, err := accesslog.Open(*cfg)
	if err != nil {
		return err
	}
	g.access.cur.Store(accesslog.New(out, g.accessLogOptions()))
	return nil
}

func (g *Gateway) accessLogOptions() accesslog.Options {
	return accesslog.Options{Logger: g.log.Named("access_log"), Stats: &g.metrics.accessLog.stats}
}

// prepareAccessLog opens what an Apply's cfg asks for, before anything
// changes: the output to switch to (nil: none, the log goes off or stays
// as it is). The same file as before is opened again, for logrotate; when
// that fails the old one is kept and the failure logged, while a new
// destination that cannot be opened fails the Apply (*accesslog.OpenError).
func (g *Gateway) prepareAccessLog(cfg *accesslog.Config) (*accesslog.Output, error) {
	if cfg == nil {
		return nil, nil
	}
	out, err := accesslog.Open(*cfg)
	if err == nil {
		return out, nil
	}
	if cur := g.access.cur.Load(); cur != nil && cfg.Writer == nil && cur.Config().Path == cfg.Path {
		g.log.Error("access log: cannot open the file again; still writing to the one open", "path", cfg.Path, "error", err)
		return nil, nil
	}
	return nil, err
}

// commitAccessLog switches to out (from prepareAccessLog), or turns the
// log off when cfg is nil. g.mu is held.
func (g *Gateway) commitAccessLog(cfg *accesslog.Config, out *accesslog.Output) {
	g.access.retired = slices.DeleteFunc(g.access.retired, (*accesslog.Log).Stopped)
	cur := g.access.cur.Load()
	switch {
	case cfg == nil && cur != nil:
		g.access.cur.Store(nil)
		cur.Stop() // Shutdown waits for it
		g.access.retired = append(g.access.retired, cur)
	case out == nil:
	case cur == nil:
		g.access.cur.Store(accesslog.New(out, g.accessLogOptions()))
	default:
		cur.Switch(out)
	}
}

// closeAccessLog writes what the access logs hold and closes them, for
// at most wait.
func (g *Gateway) closeAccessLog(wait time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	g.mu.Lock()
	logs := g.access.retired
	g.access.retired = nil
	g.mu.Unlock()
	if cur := g.access.cur.Load(); cur != nil {
		logs = append(logs, cur)
	}
	for _, l := range logs {
		if err := l.Close(ctx); err != nil {
			g.log.Warn("access log: lines still buffered at shutdown are lost: the writer is blocked", "error", err)
		}
	}
}

// ReopenAccessLog opens the access log's file again and writes to it from
// the next line on, losing none: the command line calls it on SIGUSR1,
// after logrotate renamed the file. A no-op while the log is off; for
// stdout and stderr nothing changes. Errors: the file cannot be opened
// (*accesslog.OpenError); the writer keeps the old one.
func (g *Gateway) ReopenAccessLog() error {
	if l := g.access.cur.Load(); l != nil {
		return l.Reopen()
	}
	return nil
}

// logAccess hands one request's outcome to the access log, when it is on.
// It copies strings the request holds already: no allocation. A tunnel's
// entry waits in the tunnel for its end (logAccessEnd).
func (g *Gateway) logAccess(rec *recorder, upName, backendID string, status int, reason, grpcStatus string, elapsed time.Duration) {
	l := g.access.cur.Load()
	if l == nil {
		return
	}
	r := rec.r
	e := accesslog.Entry{Start: rec.start, Duration: elapsed, RequestID: rec.id(), TraceID: rec.traceID,
		Listener: rec.listener, Protocol: protocolOf(r), Proto: r.Proto, ClientAddress: r.RemoteAddr,
		Method: r.Method, Host: r.Host, Status: status, Reason: reason,
		BytesIn: rec.body.received(), BytesOut: rec.bytesOut,
		Upstream: upName, Backend: backendID, Attempts: rec.attempts, GRPCStatus: grpcStatus}
	e.Path, e.Query = targetParts(r)
	if v := r.Header["User-Agent"]; len(v) > 0 {
		e.UserAgent = v[0]
	}
	if v := r.Header["Referer"]; len(v) > 0 {
		e.Referer = v[0]
	}
	if r.TLS != nil {
		e.SNI = r.TLS.ServerName
		if len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
			e.ClientCert = r.TLS.VerifiedChains[0][0]
		}
	}
	if t := rec.tunnel; t != nil {
		t.access = new(accesslog.Entry)
		*t.access = e
		return
	}
	l.Log(&e)
}

// logAccessEnd writes a tunnel's line once it closed: the bytes relayed
// each way and how long it was open.
func (t *tunnel) logAccessEnd() {
	e := t.access
	if e == nil {
		return
	}
	e.BytesIn, e.BytesOut = t.toBackend.sent.Load(), t.toClient.sent.Load()
	e.Duration = time.Since(e.Start)
	if l := t.g.access.cur.Load(); l != nil {
		l.Log(e)
	}
}

// targetParts splits the request target as the client sent it into its
// path and query (without "?"); for a request built in process, r.URL's.
func targetParts(r *http.Request) (path, query string) {
	t := r.RequestURI
	if t == "" {
		if r.URL == nil {
			return "", ""
		}
		return r.URL.Path, r.URL.RawQuery
	}
	if i := strings.IndexByte(t, '?'); i >= 0 {
		return t[:i], t[i+1:]
	}
	return t, ""
}

package observe

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-metrics/prometheus"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
)

// The access log observer: one line per Outcome, the same values the
// request metrics get, so the two always agree on a status.

// Access log metric keys: lines lost, by cause.
var (
	metricAccessLogDropped = []string{"access_log", "dropped"}
	metricAccessLogErrors  = []string{"access_log", "errors"}
)

var accessLogCounters = []prometheus.CounterDefinition{
	{Name: metricAccessLogDropped, Help: "Access log lines dropped because the writer fell behind (its buffer was full)."},
	{Name: metricAccessLogErrors, Help: "Access log lines lost because writing them failed (a full disk, a closed pipe)."},
}

// UnlabelledMetrics are the counters of CounterDefinitions that have no
// labels (the access log's): the series a Prometheus sink creates for
// their definition is the real one.
var UnlabelledMetrics = [][]string{metricAccessLogDropped, metricAccessLogErrors}

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
func (gm *Metrics) flushAccessLog(now time.Time) {
	a := &gm.accessLog
	dropped, errs := a.stats.Dropped.Load(), a.stats.Errors.Load()
	if dropped == a.flushedDropped && errs == a.flushedErrors && now.Sub(a.touched) < touchEvery {
		return
	}
	gm.m.IncrCounterWithLabels(metricAccessLogDropped, float32(dropped-a.flushedDropped), nil)
	gm.m.IncrCounterWithLabels(metricAccessLogErrors, float32(errs-a.flushedErrors), nil)
	a.flushedDropped, a.flushedErrors, a.touched = dropped, errs, now
}

// AccessLogDropped is the lines dropped so far.
func (gm *Metrics) AccessLogDropped() uint64 { return gm.accessLog.stats.Dropped.Load() }

// AccessLog owns the running access log (accesslog.Log; none while off)
// and the ones a reload turned off, still writing what they hold.
type AccessLog struct {
	log   hclog.Logger
	stats *accesslog.Stats
	cur   atomic.Pointer[accesslog.Log]

	mu      sync.Mutex // guards retired
	retired []*accesslog.Log
}

// NewAccessLog returns the observer, off; its counters are gm's.
func NewAccessLog(log hclog.Logger, gm *Metrics) *AccessLog {
	return &AccessLog{log: log, stats: &gm.accessLog.stats}
}

// Start starts the log of cfg (nil: off). Errors: a file that cannot be
// opened for appending (*accesslog.OpenError).
func (a *AccessLog) Start(cfg *accesslog.Config) error {
	if cfg == nil {
		return nil
	}
	out, err := accesslog.Open(*cfg)
	if err != nil {
		return err
	}
	a.cur.Store(accesslog.New(out, a.options()))
	return nil
}

func (a *AccessLog) options() accesslog.Options {
	return accesslog.Options{Logger: a.log, Stats: a.stats}
}

// Prepare opens what a reload's cfg asks for, before anything changes:
// the output to switch to (nil: none, the log goes off or stays as it is).
// The same file as before is opened again, for logrotate; when that fails
// the old one is kept and the failure logged, while a new destination
// that cannot be opened fails the reload (*accesslog.OpenError).
func (a *AccessLog) Prepare(cfg *accesslog.Config) (*accesslog.Output, error) {
	if cfg == nil {
		return nil, nil
	}
	out, err := accesslog.Open(*cfg)
	if err == nil {
		return out, nil
	}
	if cur := a.cur.Load(); cur != nil && cfg.Writer == nil && cur.Config().Path == cfg.Path {
		a.log.Error("access log: cannot open the file again; still writing to the one open", "path", cfg.Path, "error", err)
		return nil, nil
	}
	return nil, err
}

// Commit switches to out (from Prepare), or turns the log off when cfg
// is nil.
func (a *AccessLog) Commit(cfg *accesslog.Config, out *accesslog.Output) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.retired = slices.DeleteFunc(a.retired, (*accesslog.Log).Stopped)
	cur := a.cur.Load()
	switch {
	case cfg == nil && cur != nil:
		a.cur.Store(nil)
		cur.Stop() // Close waits for it
		a.retired = append(a.retired, cur)
	case out == nil:
	case cur == nil:
		a.cur.Store(accesslog.New(out, a.options()))
	default:
		cur.Switch(out)
	}
}

// Close writes what the logs hold and closes them, for at most wait.
func (a *AccessLog) Close(wait time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	a.mu.Lock()
	logs := a.retired
	a.retired = nil
	a.mu.Unlock()
	if cur := a.cur.Load(); cur != nil {
		logs = append(logs, cur)
	}
	for _, l := range logs {
		if err := l.Close(ctx); err != nil {
			a.log.Warn("access log: lines still buffered at shutdown are lost: the writer is blocked", "error", err)
		}
	}
}

// Reopen opens the log's file again and writes to it from the next line
// on, losing none (SIGUSR1, after logrotate renamed the file). A no-op
// while the log is off; for stdout and stderr nothing changes. Errors: the
// file cannot be opened (*accesslog.OpenError); the writer keeps the old
// one.
func (a *AccessLog) Reopen() error {
	if l := a.cur.Load(); l != nil {
		return l.Reopen()
	}
	return nil
}

// record writes o's line, when the log is on. It copies strings o holds:
// no allocation.
func (a *AccessLog) record(o *Outcome) {
	l := a.cur.Load()
	if l == nil {
		return
	}
	e := accesslog.Entry{Start: o.Start, Duration: o.Duration, RequestID: o.RequestID, TraceID: o.TraceID,
		Listener: o.Listener, Protocol: o.Protocol, Proto: o.Proto, ClientAddress: o.ClientAddress, SNI: o.SNI,
		ClientCert: o.ClientCert, Method: o.Method, Host: o.Host, Path: o.Path, UpstreamPath: o.UpstreamPath, Query: o.Query,
		Status: o.Status, Reason: o.Reason, BytesIn: o.BytesIn, BytesOut: o.BytesOut,
		Upstream: o.UpstreamName(), Backend: o.BackendID(), Attempts: o.nAttempts,
		UserAgent: o.UserAgent, Referer: o.Referer, GRPCStatus: o.GRPCStatus, Auth: o.Auth, AuthSubject: o.AuthSubject,
		Peer: o.Peer}
	l.Log(&e)
}

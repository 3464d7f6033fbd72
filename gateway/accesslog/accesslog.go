// Package accesslog writes the gateway's access log: one line per request,
// JSON or the NCSA combined format, to stdout, stderr or a file.
//
// Requests never wait for it. Log copies an Entry into a bounded buffer
// (a channel of Buffer entries) and returns; one writer goroutine formats
// and writes the lines. When the buffer is full the line is dropped and
// counted (Stats.Dropped); a line whose write fails (a full disk) is
// counted in Stats.Errors and the failure logged at most once a minute.
// Switch and Reopen change the output between two lines, so a rotation
// (rename, then Reopen) loses none: each line is in the old file or the new.
package accesslog

import (
	"context"
	"crypto/x509"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultBuffer is the number of entries waiting for the writer before
// more are dropped: at 50,000 requests a second, 80 ms of writer stall.
const DefaultBuffer = 4096

// batchBytes is how much the writer formats before one write: lines that
// queued up while it wrote go out in one system call.
const batchBytes = 64 << 10

// errorReportEvery bounds how often write failures are logged.
const errorReportEvery = time.Minute

// Entry is one request's record. Log copies it; every field is set by
// the caller from what the request already holds, so building one costs
// no allocation, and formatting happens on the writer's goroutine.
type Entry struct {
	// Start is when the request arrived (formatted in UTC with ms).
	Start time.Time
	// Duration is how long it took: until its answer was sent, for a
	// tunnel until it closed.
	Duration time.Duration
	// RequestID is the x-request-id; TraceID the W3C trace ID (32 hex
	// digits), "" when tracing is off.
	RequestID, TraceID string
	// Listener is the listener's name; Protocol h1, h2 or h3; Proto the
	// request's protocol version as in the request line ("HTTP/1.1").
	Listener, Protocol, Proto string
	// ClientAddress is the client's ip:port; SNI the TLS server name it
	// asked for ("" when none).
	ClientAddress, SNI string
	// Peer is the connection's TCP or UDP peer (ip:port): the balancer or
	// forwarder a client address was taken from, else ClientAddress.
	Peer string
	// ClientCert is the client certificate the handshake verified (nil:
	// none, or not verified); its subject is logged.
	ClientCert *x509.Certificate
	// Method, Host and Path are the request's, Path as the client sent it;
	// Query is the part after "?" (logged only with Config.IncludeQuery).
	Method, Host, Path, Query string
	// UpstreamPath is the path forwarded when a route rewrote it
	// (strip_prefix, prefix_rewrite); "" when it was not rewritten.
	UpstreamPath string
	// Status is the status the client got (499: it went away first);
	// Reason the gateway's x-impulse-error reason ("" when none).
	Status int
	Reason string
	// BytesIn and BytesOut are the request and response body bytes
	// relayed (for a tunnel, the bytes each way), in bytes.
	BytesIn, BytesOut int64
	// Upstream and Backend are the upstream routed to and the backend of
	// the last try ("" when none); Attempts the tries made (0: none).
	Upstream, Backend string
	Attempts          int
	// UserAgent and Referer are the request's fields ("" when absent).
	UserAgent, Referer string
	// GRPCStatus is the gRPC status name of a gRPC call ("" otherwise).
	GRPCStatus string
	// Auth is the edge authentication's outcome as "method:result"
	// ("basic:ok", "forward:denied"; "" on a route without
	// authentication); AuthSubject the user or key name it let in ("").
	Auth, AuthSubject string
}

// Stats are a log's counters, owned by the caller so that they carry over
// when it replaces one Log with another.
type Stats struct {
	// Dropped counts lines not written because the buffer was full.
	Dropped atomic.Uint64
	// Errors counts lines lost to a failed write (ENOSPC, EIO, a closed
	// pipe), a line written in part included.
	Errors atomic.Uint64
}

// Options are what a Log reports to.
type Options struct {
	// Logger receives write failures, at most once a minute (nil: none).
	Logger hclog.Logger
	// Stats receives the counts (nil: a Stats of the Log's own).
	Stats *Stats
}

// Log is a running access log. Create it with New; stop it with Close.
type Log struct {
	ch    chan Entry
	wake  chan struct{} // an output is pending
	next  atomic.Pointer[Output]
	stats *Stats
	log   hclog.Logger

	mu  sync.Mutex // serialises Switch and Reopen; guards cfg
	cfg Config

	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	// The writer's own state.
	lastReport time.Time
	lost       uint64 // lines lost since the last report
}

// New starts a log writing to out (from Open), which it owns from then on.
func New(out *Output, o Options) *Log {
	if o.Stats == nil {
		o.Stats = new(Stats)
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	n := out.cfg.Buffer
	if n <= 0 {
		n = DefaultBuffer
	}
	l := &Log{ch: make(chan Entry, n), wake: make(chan struct{}, 1), stats: o.Stats, log: o.Logger,
		cfg: out.cfg, stop: make(chan struct{}), done: make(chan struct{})}
	go l.run(out)
	return l
}

// Log hands e to the writer, or counts it dropped when the buffer is
// full. It never blocks. After Close the entry may be lost.
func (l *Log) Log(e *Entry) {
	select {
	case l.ch <- *e:
	default:
		l.stats.Dropped.Add(1)
	}
}

// Config is the configuration the log writes with.
func (l *Log) Config() Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg
}

// Switch makes the writer use out (from Open) from the next line on;
// lines before it go to the previous output, which the writer then
// closes. It returns at once, even while a write is blocked.
func (l *Log) Switch(out *Output) {
	l.mu.Lock()
	l.cfg = out.cfg
	l.mu.Unlock()
	if prev := l.next.Swap(out); prev != nil {
		prev.close() // never taken: the writer cannot hold it
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Reopen opens the log's file again (logrotate renamed it) and switches
// to it between two lines. Errors: the file cannot be opened (*OpenError);
// the writer keeps the old one.
func (l *Log) Reopen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	out, err := Open(l.cfg)
	if err != nil {
		return err
	}
	if prev := l.next.Swap(out); prev != nil {
		prev.close()
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return nil
}

// Stop tells the writer to write what is buffered, close the output and
// end, without waiting for it (Close waits).
func (l *Log) Stop() { l.stopOnce.Do(func() { close(l.stop) }) }

// Stopped reports whether the writer has ended (after Stop or Close).
func (l *Log) Stopped() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// Close is Stop, then waits for the writer to end, or gives up waiting
// when ctx ends first (a write blocked for good) and returns ctx's error.
func (l *Log) Close(ctx context.Context) error {
	l.Stop()
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the writer: it formats queued entries in batches and writes each
// batch with one call, taking a pending output between batches.
func (l *Log) run(out *Output) {
	defer close(l.done)
	defer func() {
		if p := recover(); p != nil {
			l.log.Error("access log writer panicked; the access log is off", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	buf := make([]byte, 0, batchBytes+4096)
	for {
		select {
		case e := <-l.ch:
			out = l.take(out)
			var lines int
			buf, lines = l.batch(out, out.format(buf[:0], &e), 1)
			l.write(out, buf, lines)
		case <-l.wake:
			out = l.take(out)
		case <-l.stop:
			out = l.take(out)
			for {
				var lines int
				if buf, lines = l.batch(out, buf[:0], 0); lines == 0 {
					break
				}
				l.write(out, buf, lines)
			}
			l.report(true)
			out.close()
			return
		}
	}
}

// batch formats the entries already queued, up to batchBytes.
func (l *Log) batch(out *Output, buf []byte, lines int) ([]byte, int) {
	for len(buf) < batchBytes {
		select {
		case e := <-l.ch:
			buf = out.format(buf, &e)
			lines++
		default:
			return buf, lines
		}
	}
	return buf, lines
}

// take returns the pending output, closing cur, or cur when none is.
func (l *Log) take(cur *Output) *Output {
	next := l.next.Swap(nil)
	if next == nil {
		return cur
	}
	cur.close()
	return next
}

// write writes one batch of lines; the lines a failed write did not
// complete are counted in Errors. A line cut short is ended before the
// next batch, so the lines after it stay whole.
func (l *Log) write(out *Output, buf []byte, lines int) {
	if out.torn {
		if _, err := out.w.Write(newline); err != nil {
			l.failed(out, lines, err)
			return
		}
		out.torn = false
	}
	n, err := out.w.Write(buf)
	if err == nil {
		l.report(false)
		return
	}
	written := 0
	for _, c := range buf[:n] {
		if c == '\n' {
			written++
		}
	}
	out.torn = n > 0 && buf[n-1] != '\n'
	l.failed(out, lines-written, err)
}

var newline = []byte{'\n'}

// failed counts lost lines and logs the failure, at most once a minute.
func (l *Log) failed(out *Output, lost int, err error) {
	l.stats.Errors.Add(uint64(lost))
	l.lost += uint64(lost)
	if now := time.Now(); now.Sub(l.lastReport) >= errorReportEvery {
		l.log.Error("access log: write failed; lines lost (reported at most once a minute; counted in impulse_access_log_errors)",
			"path", out.cfg.Path, "error", err, "lines_lost", l.lost)
		l.lastReport, l.lost = now, 0
	}
}

// report logs, after failures, the lines lost since the last report once
// writes work again (or at the end).
func (l *Log) report(end bool) {
	if l.lost == 0 || (!end && time.Since(l.lastReport) < errorReportEvery) {
		return
	}
	l.log.Warn("access log: lines lost to write errors since the last report", "lines_lost", l.lost)
	l.lastReport, l.lost = time.Now(), 0
}

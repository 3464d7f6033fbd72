package agent

import (
	"context"
	"crypto/tls"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/credentials"

	"github.com/impulse-agent/impulse-agent/hcl"
)

// The tracing block (README "Tracing"): the agent builds an OpenTelemetry
// SDK TracerProvider from it and hands the gateway its trace API. Spans
// leave through a BatchSpanProcessor: a bounded queue (2048 spans by
// default) that drops when full and never blocks a request, and one
// exporting goroutine. A collector that is down therefore costs requests
// nothing; its errors are logged at most once per exportErrorEvery. What
// the block does not set can be tuned with the SDK's standard environment
// variables (OTEL_BSP_*, OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, ...).

// exportErrorEvery is the least time between two log lines about failed
// exports (or other OpenTelemetry errors); the ones in between are counted
// into the next line's "suppressed".
const exportErrorEvery = time.Minute

// tracingShutdownTimeout bounds the flush of a provider that stops (at exit,
// or replaced by a reload) when the collector does not answer; past it the
// exports still running are canceled and what is left dropped. A variable
// for tests.
var tracingShutdownTimeout = 5 * time.Second

// tracing is the TracerProvider of one tracing block. A nil *tracing is
// tracing off.
type tracing struct {
	cfg  hcl.Tracing
	tp   *sdktrace.TracerProvider
	exp  *loggingExporter
	errs *rateLog
}

// newTracing builds the provider of cfg (nil: off, returns nil). Errors: an
// exporter the SDK refuses to build (it does not connect here: an
// unreachable collector is not an error).
func newTracing(cfg *hcl.Tracing, log hclog.Logger) (*tracing, error) {
	if cfg == nil {
		return nil, nil
	}
	errs := newRateLog(log, exportErrorEvery)
	exp, err := newOTLPExporter(cfg)
	if err != nil {
		return nil, err
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(cfg.ServiceName)))
	if err != nil {
		return nil, err
	}
	le := newLoggingExporter(exp, errs)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(le), // drops when full (no BlockOnQueueFull)
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
	)
	t := &tracing{cfg: *cfg, tp: tp, exp: le, errs: errs}
	installOTelErrorLog(errs)
	log.Info("tracing on", "otlp_endpoint", cfg.OTLPEndpoint, "protocol", cfg.Protocol, "tls", cfg.TLS,
		"sample_ratio", cfg.SampleRatio, "service_name", cfg.ServiceName)
	return t, nil
}

// newOTLPExporter is the OTLP exporter of cfg: gRPC or HTTP/protobuf, in
// plaintext unless the endpoint said https:// (then verified against the
// system roots).
func newOTLPExporter(cfg *hcl.Tracing) (sdktrace.SpanExporter, error) {
	ctx := context.Background() // used for the options only: nothing connects yet
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.Protocol == "http" {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(cfg.Endpoint)}
		if cfg.URLPath != "" {
			opts = append(opts, otlptracehttp.WithURLPath(cfg.URLPath))
		}
		if cfg.TLS {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(tc))
		} else {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return otlptracehttp.New(ctx, opts...)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.Endpoint)}
	if cfg.TLS {
		opts = append(opts, otlptracegrpc.WithTLSCredentials(credentials.NewTLS(tc)))
	} else {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	return otlptracegrpc.New(ctx, opts...)
}

// provider is what the gateway gets: nil (an untyped nil interface) when
// tracing is off.
func (t *tracing) provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// same reports whether t is what cfg asks for (both off, or equal blocks).
func (t *tracing) same(cfg *hcl.Tracing) bool {
	if t == nil || cfg == nil {
		return t == nil && cfg == nil
	}
	return t.cfg == *cfg
}

// shutdown flushes what is queued, for at most tracingShutdownTimeout, and
// stops the provider: spans ended later are dropped. Safe on nil.
func (t *tracing) shutdown() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
	defer cancel()
	// Past the deadline the processor's goroutine would go on exporting
	// what is queued, one export timeout per batch: cancel its exports.
	defer context.AfterFunc(ctx, t.exp.abort)()
	if err := t.tp.Shutdown(ctx); err != nil {
		t.errs.error("tracing: shutdown did not flush every span", "error", err)
	}
	t.exp.abort()
	otelErrors.CompareAndSwap(t.errs, nil)
}

// loggingExporter logs the errors of the exporter it wraps (rate-limited)
// and reports none to the BatchSpanProcessor, which would send them to the
// process-wide OpenTelemetry error handler: each agent logs its own. Its
// exports end when abort is called.
type loggingExporter struct {
	sdktrace.SpanExporter
	errs    *rateLog
	stopped context.Context
	abort   context.CancelFunc
}

func newLoggingExporter(exp sdktrace.SpanExporter, errs *rateLog) *loggingExporter {
	stopped, abort := context.WithCancel(context.Background())
	return &loggingExporter{SpanExporter: exp, errs: errs, stopped: stopped, abort: abort}
}

// ExportSpans exports spans; on failure they are dropped (the exporter has
// retried within its timeout) and the error logged. After abort nothing is
// sent.
func (e *loggingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.stopped.Err() != nil {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.stopped, cancel)()
	if err := e.SpanExporter.ExportSpans(ctx, spans); err != nil {
		e.errs.error("tracing: exporting spans failed; they are dropped", "spans", len(spans), "error", err)
	}
	return nil
}

// rateLog logs at most one line per interval; the lines it holds back are
// counted in the next one ("suppressed").
type rateLog struct {
	log   hclog.Logger
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func newRateLog(log hclog.Logger, every time.Duration) *rateLog {
	return &rateLog{log: log, every: every, now: time.Now}
}

// error logs msg with args at error level unless a line went out less than
// every ago.
func (l *rateLog) error(msg string, args ...any) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
	}
	l.log.Error(msg, args...)
}

// OpenTelemetry's error handler and internal logger are process-wide: they
// are set once, to forward to the rateLog of the newest running provider
// (otelErrors; nil: dropped). Export errors never reach them (see
// loggingExporter), so agents sharing a process (tests) each log their
// own, and only the SDK's rare other errors may land in another agent's
// log.
var (
	otelErrors     atomic.Pointer[rateLog]
	otelGlobalOnce sync.Once
)

// installOTelErrorLog makes errs the target of OpenTelemetry's global error
// handler and logger.
func installOTelErrorLog(errs *rateLog) {
	otelErrors.Store(errs)
	otelGlobalOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			if l := otelErrors.Load(); l != nil {
				l.error("tracing: OpenTelemetry error", "error", err)
			}
		}))
		otel.SetLogger(logr.New(otelLogSink{}))
	})
}

// otelLogSink passes OpenTelemetry's internal error messages to otelErrors;
// its info and warning messages (verbosity above 0) are not logged.
type otelLogSink struct{ values []any }

func (otelLogSink) Init(logr.RuntimeInfo)    {}
func (otelLogSink) Enabled(level int) bool   { return false }
func (otelLogSink) Info(int, string, ...any) {}

func (s otelLogSink) Error(err error, msg string, kv ...any) {
	if l := otelErrors.Load(); l != nil {
		l.error("tracing: OpenTelemetry: "+msg, append(append(append([]any(nil), s.values...), kv...), "error", err)...)
	}
}

func (s otelLogSink) WithValues(kv ...any) logr.LogSink {
	return otelLogSink{values: append(append([]any(nil), s.values...), kv...)}
}

func (s otelLogSink) WithName(string) logr.LogSink { return s }

// nextTracing is the provider a reload to cfg uses: the running one when the
// block is unchanged, else a new one (nil: off). a.mu must be held.
func (a *Agent) nextTracing(cfg *hcl.Tracing) (*tracing, error) {
	if a.tracing.same(cfg) {
		return a.tracing, nil
	}
	return newTracing(cfg, a.log.Named("tracing"))
}

// retire shuts t down in the background (a reload replaced it): what it
// queued is flushed while the new one serves. closeTracing waits for it.
func (a *Agent) retire(t *tracing) {
	if t != nil {
		a.retiring.Go(t.shutdown)
	}
}

// closeTracing stops the running provider, flushing its spans, and waits
// for the retired ones (each bounded by tracingShutdownTimeout).
func (a *Agent) closeTracing() {
	a.mu.Lock()
	t := a.tracing
	a.tracing = nil
	a.mu.Unlock()
	t.shutdown()
	a.retiring.Wait()
}

// reinstall makes t's log the target of OpenTelemetry's global errors again
// (a provider built for a rejected reload was shut down). Safe on nil.
func (t *tracing) reinstall() {
	if t != nil {
		otelErrors.Store(t.errs)
	}
}

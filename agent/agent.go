// Package agent wires impulse-agent together: it loads the HCL
// configuration, owns logging and metrics, converts configuration and Consul
// discovery snapshots into gateway types, serves the control API, reloads,
// and shuts everything down in order.
package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	hcl2 "github.com/hashicorp/hcl/v2"

	"github.com/impulse-agent/impulse-agent/gateway"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// Options are the command-line inputs of an agent.
type Options struct {
	// ConfigPaths are files or directories (see hcl.Load).
	ConfigPaths []string
	// Dev runs the embedded default configuration with two demo backends.
	Dev bool
	// DevListener and DevControl override the -dev addresses
	// (default 127.0.0.1:8443 and 127.0.0.1:9901).
	DevListener, DevControl string
	// LogLevel and LogJSON override the configuration when set.
	LogLevel string
	LogJSON  *bool
	// LogOutput receives logs (default os.Stderr). New and Run also report
	// their own failures there, in the log's format, before returning them.
	LogOutput io.Writer
}

// ConfigError carries configuration diagnostics (file:line:column, field,
// problem) so the command line can print them one per line.
type ConfigError struct {
	Diags hcl2.Diagnostics
}

// Error lists the error diagnostics, one "file:line:column: summary: detail"
// per line.
func (e *ConfigError) Error() string {
	var b strings.Builder
	for _, d := range e.Diags {
		if d.Severity == hcl2.DiagError {
			b.WriteString(hcl.FormatDiagnostic(d))
			b.WriteString("\n")
		}
	}
	return strings.TrimSpace(b.String())
}

// Agent is one running impulse-agent. Create it with New, run it with Run.
type Agent struct {
	opts Options
	log  hclog.InterceptLogger
	json bool // the log format is JSON
	tel  *telemetry
	gw   *gateway.Gateway
	dev  *devEnv

	mu   sync.Mutex // serializes Reload and catalog applies; guards cfg, gen, disc, base, synth, synthGC, merger, discTargets
	cfg  *hcl.Config
	gen  uint64
	disc *discoverySet
	// base is cfg converted for the gateway (listeners and upstream
	// blocks), built once per load so that catalog applies reuse its TLS
	// configurations and the gateway keeps those upstreams as they are.
	base gateway.Config
	// synth are the catalog upstreams last applied, synthGC the same
	// converted for the gateway; catalog is the report of that merge, for
	// the control API.
	synth   []hcl.Upstream
	synthGC []gateway.UpstreamConfig
	catalog atomic.Pointer[catalogReport]
	// merger remembers what the last merges read of each catalog service
	// (apply.go); discTargets what discovery was last applied.
	merger      catalogMerger
	discTargets discoveryTargets
	draining    atomic.Bool
	// wasReady: ready() has answered ok once. From then on, discovery that
	// has not synced (an upstream added by a reload) degrades readiness
	// instead of failing it, like Envoy's initialization-only warming.
	wasReady atomic.Bool
	// controlToken is the control API's bearer token ("" = none), re-read
	// from control.token_file on every reload.
	controlToken atomic.Pointer[string]

	controlAddr atomic.Pointer[net.Addr]
	// traffic is the status page's request rates (traffic.go).
	traffic *trafficRing

	// tracing is the tracing block's provider (nil: off; guarded by mu);
	// retiring are the ones reloads replaced, flushing (tracing.go).
	tracing  *tracing
	retiring sync.WaitGroup

	// mesh is the Connect identity (mesh.go); nil without a connect block.
	// Set by New, never replaced: a reload cannot change the block.
	mesh *meshIdentity
}

// New loads the configuration and builds every component without binding a
// socket. Errors (also reported on LogOutput): *ConfigError for invalid
// configuration and for TLS material that does not load (at cert_file,
// key_file, ca_file) and for a telemetry dogstatsd_address that does not
// resolve; others for telemetry setup.
func New(opts Options) (*Agent, error) {
	if opts.LogOutput == nil {
		opts.LogOutput = os.Stderr
	}
	a := &Agent{opts: opts}
	if err := a.build(); err != nil {
		a.closeDev()
		a.reportStart(err)
		return nil, err
	}
	return a, nil
}

// build is New once the options are defaulted.
func (a *Agent) build() error {
	opts := a.opts
	if opts.Dev {
		dev, err := startDev(opts.DevListener, opts.DevControl)
		if err != nil {
			return err
		}
		a.dev = dev
	}
	cfg, err := a.load()
	if err != nil {
		return err
	}
	level, json := cfg.LogLevel, cfg.LogJSON
	if opts.LogLevel != "" {
		level = opts.LogLevel
	}
	if opts.LogJSON != nil {
		json = *opts.LogJSON
	}
	a.log, a.json = newLogger(opts.LogOutput, level, json), json
	a.logWarnings(cfg)
	gc, err := gatewayConfig(cfg)
	if err != nil {
		return err
	}
	a.mesh = newMeshIdentity(cfg.Connect, a.log.Named("connect"))
	meshListeners(&gc, cfg, a.mesh) // mesh.go
	meshUpstreams(&gc, cfg, a.mesh)
	if a.tel, err = newTelemetry(cfg.Telemetry); err != nil {
		return err
	}
	if a.tracing, err = newTracing(cfg.Tracing, a.log.Named("tracing")); err != nil {
		a.tel.close()
		return err
	}
	gc.Logger, gc.Metrics, gc.QUICLogger = a.log.Named("gateway"), a.tel.metrics, newSlogLogger(a.log.Named("quic"))
	gc.TracerProvider = a.tracing.provider()
	if a.gw, err = gateway.New(gc); err != nil {
		a.tracing.shutdown()
		a.tel.close()
		return bindError(cfg, err) // an access log file that cannot be opened
	}
	a.cfg, a.gen, a.base = cfg, 1, gc
	a.traffic = newTrafficRing(a.gw.Traffic, trafficBucket, trafficBuckets, time.Now())
	a.catalog.Store(&catalogReport{})
	a.disc = newDiscoverySet(a.log.Named("discovery"), a.tel.metrics, a.gw, a.applyCatalog)
	return nil
}

// Logger is the agent's root logger (its format and level), for the command
// line's own messages such as signals.
func (a *Agent) Logger() hclog.Logger { return a.log }

// load reads the configuration files, or the embedded -dev configuration.
func (a *Agent) load() (*hcl.Config, error) {
	var (
		cfg   *hcl.Config
		diags hcl2.Diagnostics
	)
	if a.dev != nil {
		cfg, diags = hcl.Parse("dev.hcl", a.dev.config)
	} else {
		if len(a.opts.ConfigPaths) == 0 {
			return nil, errors.New("agent: no configuration: use -config=PATH or -dev")
		}
		cfg, diags = hcl.Load(a.opts.ConfigPaths)
	}
	if diags.HasErrors() {
		return nil, &ConfigError{Diags: diags}
	}
	return cfg, nil
}

// Run serves until ctx is done, then shuts down in order: readiness turns
// 503, listeners send GOAWAY and drain for drain_timeout, discovery stops,
// the control API closes last. Errors (also reported on LogOutput): a
// failure at start, as a *ConfigError where it has a place in the
// configuration (a bind error at the listener's or the control API's
// address, an unreadable token_file), else as it is (Consul settings). A
// drain that runs out of time closes the remaining connections and is
// logged, not an error: the shutdown itself completed. The -dev temporary
// directory is removed on every return.
func (a *Agent) Run(ctx context.Context) error {
	err := a.run(ctx)
	a.closeTracing() // the drain's last spans are flushed
	a.tel.close()    // last: the drain's final metrics reach statsd and DogStatsD
	a.closeDev()
	if err != nil {
		a.reportStart(err)
	}
	return err
}

func (a *Agent) run(ctx context.Context) error {
	a.mu.Lock()
	cfg := a.cfg
	a.mu.Unlock()

	// What New started (samplers, the discovery applier) stops on a
	// failure before the control API is up.
	abort := func(err error) error {
		a.disc.stop()
		a.mesh.stop()
		_ = a.gw.Shutdown(context.Background())
		return err
	}
	token, err := readToken(cfg.Control.TokenFile, cfg.Control.TokenFileRange)
	if err != nil {
		return abort(err)
	}
	ln, err := net.Listen("tcp", cfg.Control.Address)
	if err != nil {
		return abort(configErr(cfg.Control.AddressRange, "Cannot bind control address", "control address", err))
	}
	addr := ln.Addr()
	a.controlAddr.Store(&addr)
	control := &http.Server{Handler: a.controlHandler(token, cfg.Control.EnableDebug), ReadHeaderTimeout: 10 * time.Second}
	controlDone := make(chan struct{})
	go func() {
		defer close(controlDone)
		if err := control.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("control API stopped", "error", err)
		}
	}()
	a.log.Info("control API listening", "address", addr.String())

	a.mu.Lock()
	listeners := a.base.Listeners
	a.mu.Unlock()
	err = bindError(cfg, a.gw.Start(ctx, listeners))
	if err == nil && a.mesh != nil {
		err = a.mesh.start(cfg.Consul, a.tel.metrics) // mesh.go; until it has a leaf, mesh listeners refuse handshakes
	}
	if err == nil {
		err = a.disc.apply(cfg, false)
	}
	var deregister func()
	if err == nil {
		deregister, err = a.startRegistration(cfg)
	}
	if err != nil {
		a.disc.stop()
		a.mesh.stop()
		_ = control.Close()
		<-controlDone
		_ = a.gw.Shutdown(context.Background())
		return err
	}
	if a.dev != nil {
		a.dev.announce(a.log, a.gw.Addrs())
	}
	samplerCtx, stopSampler := context.WithCancel(context.Background())
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-samplerCtx.Done():
				return
			case now := <-t.C:
				a.disc.sampleStaleness()
				a.traffic.tick(now)
				if !a.wasReady.Load() {
					a.ready() // latches wasReady without waiting for a probe
				}
			}
		}
	}()
	defer func() { stopSampler(); <-samplerDone }()
	a.log.Info("impulse-agent started", "listeners", len(cfg.Listeners), "upstreams", len(cfg.Upstreams))

	<-ctx.Done()
	return a.shutdown(cfg.DrainTimeout, deregister, control, controlDone)
}

func (a *Agent) shutdown(drain time.Duration, deregister func(), control *http.Server, controlDone chan struct{}) error {
	a.draining.Store(true)
	// A reload already past its draining check finishes before the drain
	// starts; later ones see draining and are refused.
	a.mu.Lock()
	a.mu.Unlock() //nolint:staticcheck // an empty critical section: waiting for Reload is the point
	if deregister != nil {
		// Leave the catalog first: Consul stops sending new clients here
		// before the listeners stop accepting.
		deregister()
	}
	a.log.Info("shutting down: draining listeners", "drain_timeout", drain.String())
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := a.gw.Shutdown(dctx); err != nil {
		a.log.Warn("drain_timeout reached; remaining connections closed", "error", err)
	}
	a.disc.stop()
	a.mesh.stop()
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ccancel()
	_ = control.Shutdown(cctx)
	<-controlDone
	a.log.Info("stopped")
	return nil
}

// Reload re-reads the configuration (SIGHUP, POST /v1/reload). On invalid
// configuration it returns the error and its diagnostics in validate's
// one-line format (never empty when err is set) and keeps the running one;
// after the graceful shutdown began it returns ErrDraining and does
// nothing. Listener changes take effect, a changed tracing block replaces
// the TracerProvider (the old one flushes in the background), and
// control.token_file is read again (a token added, rotated or removed
// applies at once); the control
// address and debug endpoints, telemetry and the logger's format need a
// restart (a warning says so).
func (a *Agent) Reload() (generation uint64, diags []string, err error) {
	if a.draining.Load() {
		a.log.Warn("reload refused: the gateway is draining")
		return a.generation(), nil, ErrDraining
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.draining.Load() { // shutdown began while waiting for the lock
		a.log.Warn("reload refused: the gateway is draining")
		return a.gen, nil, ErrDraining
	}
	if err := a.reloadLocked(); err != nil {
		diags = diagLines(err)
		for _, d := range diags {
			a.log.Error("reload rejected; keeping the running configuration", "diagnostic", d)
		}
		return a.gen, diags, err
	}
	a.log.Info("configuration reloaded", "generation", a.gen)
	return a.gen, nil, nil
}

func (a *Agent) reloadLocked() error {
	cfg, err := a.load()
	if err != nil {
		return err
	}
	base, err := gatewayConfig(cfg)
	if err != nil {
		return err
	}
	if err := checkConnectReload(a.cfg, cfg); err != nil { // mesh.go
		return err
	}
	meshListeners(&base, cfg, a.mesh)
	meshUpstreams(&base, cfg, a.mesh)
	token, err := readToken(cfg.Control.TokenFile, cfg.Control.TokenFileRange)
	if err != nil {
		return err
	}
	trc, err := a.nextTracing(cfg.Tracing)
	if err != nil {
		return err
	}
	base.TracerProvider = trc.provider()
	if err := a.applyLocked(cfg, base, true); err != nil {
		if trc != a.tracing {
			trc.shutdown()
			a.tracing.reinstall()
		}
		return bindError(cfg, err)
	}
	if trc != a.tracing {
		if trc == nil {
			a.log.Info("tracing off")
		}
		a.retire(a.tracing)
		a.tracing = trc
	}
	a.base = base
	a.controlToken.Store(&token)
	oldCtl, newCtl := a.cfg.Control, cfg.Control
	if oldCtl.Address != newCtl.Address || oldCtl.EnableDebug != newCtl.EnableDebug || !cfg.Telemetry.Equal(a.cfg.Telemetry) || cfg.LogJSON != a.cfg.LogJSON {
		a.log.Warn("reload: control.address, control.enable_debug, telemetry and log_json changes take effect after a restart")
	}
	if a.opts.LogLevel == "" {
		a.log.SetLevel(hclog.LevelFromString(cfg.LogLevel))
	}
	a.cfg = cfg
	a.gen++
	a.logWarnings(cfg)
	return nil
}

// logWarnings logs the configuration's warnings (an expiring certificate, a
// setting not supported yet) at start and after every accepted reload.
func (a *Agent) logWarnings(cfg *hcl.Config) {
	for _, w := range cfg.Warnings {
		a.log.Warn("configuration", "warning", hcl.FormatDiagnostic(w))
	}
}

// ControlAddr is the bound control API address once Run has started it.
func (a *Agent) ControlAddr() net.Addr {
	if p := a.controlAddr.Load(); p != nil {
		return *p
	}
	return nil
}

func (a *Agent) closeDev() {
	if a.dev != nil {
		a.dev.close()
	}
}

// ForceClose closes every listener and connection at once (clients see
// H3_REQUEST_CANCELLED instead of waiting for an idle timeout): the forced
// stop after a second signal, while a graceful Run is still draining. It
// also removes the -dev temporary directory: the process exits next.
func (a *Agent) ForceClose() {
	a.gw.Close()
	a.closeDev()
}

// ListenerAddrs returns the bound UDP address of every running listener.
func (a *Agent) ListenerAddrs() map[string]net.Addr { return a.gw.Addrs() }

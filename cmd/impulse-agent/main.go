// Command impulse-agent is an HTTP/3 edge gateway and service-mesh sidecar
// driven by Consul service discovery. See README.md and
// ../shared/design/interface.md for the command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/agent"
	"github.com/impulse-agent/impulse-agent/hcl"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

func main() {
	setGC()
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches subcommands and returns the process exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "validate":
			return runValidate(args[1:], stdout, stderr)
		case "probe":
			return runProbe(args[1:], stdin, stdout, stderr)
		case "version", "-version", "--version":
			return runVersion(args[1:], stdout, stderr)
		}
	}
	return runAgent(args, stderr)
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

const usage = `Usage:
  impulse-agent -config=PATH [-config=PATH ...] [-log-level=LEVEL] [-log-json]
  impulse-agent -dev [-dev-listen=ADDR] [-dev-control=ADDR]
  impulse-agent validate -config=PATH [...]
  impulse-agent probe [-insecure] [-cacert FILE] [-X METHOD] [-H 'Name: value']... [-d DATA|@file|@-] [-v] [-n COUNT] [-timeout 10s] URL
  impulse-agent version

Signals: SIGINT/SIGTERM drain and stop (a second one stops at once); SIGHUP reloads;
SIGUSR1 reopens the access log file (after logrotate renamed it).
`

func runAgent(args []string, stderr io.Writer) int {
	// Until the agent's logger exists, the command line's own messages
	// follow -log-json too, so that every line of the output parses.
	cli := newCLILog(stderr, wantsJSON(args))
	fs := flag.NewFlagSet("impulse-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if cli.json {
		fs.SetOutput(io.Discard) // the error is logged below; usage is text
	}
	fs.Usage = func() { fmt.Fprint(fs.Output(), usage, "\nFlags:\n"); fs.PrintDefaults() }
	var opts agent.Options
	var configs stringsFlag
	fs.Var(&configs, "config", "configuration file or directory (repeatable)")
	fs.BoolVar(&opts.Dev, "dev", false, "run the embedded default: HTTP/1.1, HTTP/2 and HTTP/3 on 127.0.0.1:8443, two demo backends, no Consul")
	fs.StringVar(&opts.DevListener, "dev-listen", "", "with -dev: listener address, UDP and TCP (default 127.0.0.1:8443)")
	fs.StringVar(&opts.DevControl, "dev-control", "", "with -dev: control API address (default 127.0.0.1:9901)")
	fs.StringVar(&opts.LogLevel, "log-level", "", "trace | debug | info | warn | error (overrides log_level)")
	logJSON := fs.Bool("log-json", false, "log as JSON (overrides log_json)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			if cli.json {
				fs.SetOutput(stderr)
				fs.Usage()
			}
			return 0
		}
		if cli.json { // the flag package printed it otherwise
			cli.usageError("%v", err)
		}
		return 2
	}
	if fs.NArg() > 0 {
		cli.usageError("unexpected argument %q", fs.Arg(0))
		return 2
	}
	if opts.Dev && len(configs) > 0 {
		cli.usageError("-dev and -config are mutually exclusive")
		return 2
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "log-json" {
			opts.LogJSON = logJSON
		}
	})
	switch opts.LogLevel {
	case "", "trace", "debug", "info", "warn", "error":
	default:
		cli.usageError("-log-level %q: want trace, debug, info, warn or error", opts.LogLevel)
		return 2
	}
	opts.ConfigPaths = configs
	opts.LogOutput = stderr

	// Signals are caught from here on: one arriving while the agent starts
	// still stops it through Run, which removes what -dev created.
	sigs := make(chan os.Signal, 4)
	notify := []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}
	if reopenSignal != nil {
		notify = append(notify, reopenSignal) // signals_unix.go
	}
	signal.Notify(sigs, notify...)
	defer signal.Stop(sigs)
	if brokenPipeSignal != nil {
		// Never read: handling SIGPIPE is what turns it into EPIPE
		// (signals_unix.go), and Notify drops what does not fit.
		pipe := make(chan os.Signal, 1)
		signal.Notify(pipe, brokenPipeSignal)
		defer signal.Stop(pipe)
	}
	a, err := agent.New(opts)
	if err != nil {
		return 1 // New reported it, in the log's format
	}
	log := a.Logger()
	// quic-go and net/http write some warnings with the standard library's
	// log package: send them through the agent's logger and format.
	stdlog.SetFlags(0)
	stdlog.SetOutput(log.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reclaimCtx, stopReclaim := context.WithCancel(context.Background())
	defer stopReclaim()
	go reclaimWhenIdle(reclaimCtx)
	var forced atomic.Bool
	go func() {
		var stopping time.Time
		for s := range sigs {
			switch {
			case s == syscall.SIGHUP:
				log.Info("signal received: reloading", "signal", s.String())
				_, _, _ = a.Reload() // the agent logs the outcome (refused while draining)
			case reopenSignal != nil && s == reopenSignal:
				_ = a.ReopenAccessLog() // the agent logs the outcome
			case stopping.IsZero():
				log.Info("signal received: draining and stopping", "signal", s.String())
				stopping = time.Now()
				cancel()
			case time.Since(stopping) > time.Second:
				// Within a second it is the same signal sent to the whole
				// process group (timeout(1), some supervisors); later it is
				// an operator insisting.
				log.Warn("second signal: closing connections and exiting now", "signal", s.String())
				forced.Store(true) // Run may return first: exit 1 there too
				a.ForceClose()
				os.Exit(1)
			default:
				// Logged at info: an operator who pressed ^C twice quickly
				// must learn that a later one forces the exit.
				log.Info("signal ignored: within a second of the first it is taken as the same one; send it again to exit at once", "signal", s.String())
			}
		}
	}()
	if err := a.Run(ctx); err != nil || forced.Load() {
		return 1 // Run reported its error
	}
	return 0
}

// runVersion prints the version; -h prints its usage (exit 0), anything
// else is a usage error (exit 2), as for the other commands.
func runVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprintln(stderr, "usage: impulse-agent version\nPrints the version of this binary.") }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "impulse-agent version: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return 2
	}
	fmt.Fprintf(stdout, "impulse-agent %s\n", version)
	return 0
}

// runValidate implements `impulse-agent validate`: exit 0 when valid, 1 with
// diagnostics, 2 on a usage error; -h prints its usage and exits 0.
func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var configs stringsFlag
	fs.Var(&configs, "config", "configuration file or directory (repeatable)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: impulse-agent validate -config=PATH [-config=PATH ...] [PATH ...]")
		fmt.Fprintln(stderr, "Checks the configuration without binding anything: exit 0 when valid, 1 with diagnostics (file:line:column: summary: field: message).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	configs = append(configs, fs.Args()...)
	if len(configs) == 0 {
		fmt.Fprintln(stderr, "impulse-agent validate: give -config=PATH")
		return 2
	}
	cfg, diags := hcl.Load(configs)
	_ = hcl.WriteDiagnosticLines(stderr, diags)
	if diags.HasErrors() {
		return 1
	}
	fmt.Fprintf(stdout, "configuration is valid: %d file(s), %d listener(s), %d upstream(s)\n", len(cfg.Files), len(cfg.Listeners), len(cfg.Upstreams))
	return 0
}

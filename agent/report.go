package agent

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"
	hcl2 "github.com/hashicorp/hcl/v2"

	"github.com/impulse-agent/impulse-agent/hcl"
)

// reportStart writes a failure of New or Run on the log output before it is
// returned. Text: configuration diagnostics one per line in validate's
// format (file:line:column: summary: field: message), anything else as
// "impulse-agent: <error>". JSON: one record per diagnostic, with the same
// line in "diagnostic" and its parts in "file", "line", "column",
// "summary" and "detail", so every line of the output parses.
func (a *Agent) reportStart(err error) {
	log, json := a.log, a.json
	if log == nil {
		// The configuration did not load: only the command line says
		// which format is wanted.
		json = a.opts.LogJSON != nil && *a.opts.LogJSON
		log = newLogger(a.opts.LogOutput, "info", json)
	}
	var ce *ConfigError
	if !json {
		if errors.As(err, &ce) {
			_ = hcl.WriteDiagnosticLines(a.opts.LogOutput, ce.Diags)
			return
		}
		fmt.Fprintf(a.opts.LogOutput, "impulse-agent: %v\n", err)
		return
	}
	if errors.As(err, &ce) {
		logDiagnostics(log, hclog.Error, "configuration error; not starting", ce.Diags, true)
		return
	}
	log.Error("impulse-agent failed; not starting", "error", err.Error())
}

// logDiagnostics logs each of diags as one record at level: msg plus the
// diagnostic line, and with structured its parts.
func logDiagnostics(log hclog.Logger, level hclog.Level, msg string, diags hcl2.Diagnostics, structured bool) {
	for _, d := range diags {
		lvl := level
		if d.Severity == hcl2.DiagWarning {
			lvl = hclog.Warn
		}
		args := []any{"diagnostic", hcl.FormatDiagnostic(d)}
		if structured {
			if d.Subject != nil {
				args = append(args, "file", d.Subject.Filename, "line", d.Subject.Start.Line, "column", d.Subject.Start.Column)
			}
			args = append(args, "summary", d.Summary, "detail", d.Detail)
		}
		log.Log(lvl, msg, args...)
	}
}

package agent

import (
	"context"
	"io"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// newLogger returns the root logger every subsystem is Named from.
func newLogger(out io.Writer, level string, json bool) hclog.InterceptLogger {
	return hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:            "impulse-agent",
		Level:           hclog.LevelFromString(level),
		Output:          out,
		JSONFormat:      json,
		IncludeLocation: false,
		TimeFormat:      "2006-01-02T15:04:05.000Z0700",
	})
}

// slogHandler bridges quic-go's *slog.Logger output into hclog, so there is
// one logging stack. quic-go's Info and Debug records are chatty per
// connection; they are logged at Trace and Debug respectively.
type slogHandler struct {
	log   hclog.Logger
	attrs []any
	group string
}

func newSlogLogger(l hclog.Logger) *slog.Logger { return slog.New(&slogHandler{log: l}) }

func (h *slogHandler) Enabled(_ context.Context, lvl slog.Level) bool {
	return h.log.GetLevel() <= toHclog(lvl)
}

func (h *slogHandler) Handle(_ context.Context, r slog.Record) error {
	args := make([]any, 0, len(h.attrs)+2*r.NumAttrs())
	args = append(args, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		args = append(args, h.key(a.Key), a.Value.Any())
		return true
	})
	h.log.Log(toHclog(r.Level), r.Message, args...)
	return nil
}

func (h *slogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := &slogHandler{log: h.log, group: h.group, attrs: append([]any(nil), h.attrs...)}
	for _, a := range attrs {
		n.attrs = append(n.attrs, h.key(a.Key), a.Value.Any())
	}
	return n
}

func (h *slogHandler) WithGroup(name string) slog.Handler {
	return &slogHandler{log: h.log, attrs: h.attrs, group: h.key(name)}
}

func (h *slogHandler) key(k string) string {
	if h.group == "" {
		return k
	}
	return h.group + "." + k
}

func toHclog(l slog.Level) hclog.Level {
	switch {
	case l >= slog.LevelError:
		return hclog.Error
	case l >= slog.LevelWarn:
		return hclog.Warn
	case l >= slog.LevelInfo:
		return hclog.Debug
	default:
		return hclog.Trace
	}
}

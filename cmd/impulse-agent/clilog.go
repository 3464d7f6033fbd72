package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// cliLog writes the command line's own errors (bad flags) before the
// agent's logger exists: plain text, or with -log-json one JSON record per
// message in go-hclog's format, as the agent logs.
type cliLog struct {
	out  io.Writer
	json bool
	log  hclog.Logger
}

func newCLILog(out io.Writer, json bool) *cliLog {
	c := &cliLog{out: out, json: json}
	if json {
		c.log = hclog.New(&hclog.LoggerOptions{Name: "impulse-agent", Output: out, JSONFormat: true,
			TimeFormat: "2006-01-02T15:04:05.000Z0700"})
	}
	return c
}

// usageError reports a command-line mistake; text output adds the usage.
func (c *cliLog) usageError(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if c.json {
		c.log.Error("invalid command line", "error", msg)
		return
	}
	fmt.Fprintf(c.out, "impulse-agent: %s\n\n%s", msg, usage)
}

// wantsJSON reports whether args ask for -log-json (also --log-json and
// -log-json=BOOL), read before flag parsing so that parse errors follow it.
func wantsJSON(args []string) bool {
	json := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "log-json" {
			continue
		}
		json = true
		if hasVal {
			json, _ = strconv.ParseBool(val)
		}
	}
	return json
}

//go:build unix

package main

import (
	"os"
	"syscall"
)

// reopenSignal asks the agent to open the access log file again
// (logrotate's postrotate).
var reopenSignal os.Signal = syscall.SIGUSR1

// brokenPipeSignal is caught (and discarded) while the agent runs: a Go
// program that does not handle SIGPIPE dies of it on a write to a closed
// pipe on fd 1 or 2 (os/signal, "SIGPIPE"), which would end the gateway
// when the reader of its log or of `access_log { path = "stdout" }` goes
// away. Handled, the write returns EPIPE: the access log counts the lines
// in impulse_access_log_errors and the gateway serves on. Caught rather
// than ignored: an ignored signal stays ignored across exec.
var brokenPipeSignal os.Signal = syscall.SIGPIPE

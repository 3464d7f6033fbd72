//go:build unix

package main

import (
	"os"
	"syscall"
)

// reopenSignal asks the agent to open the access log file again
// (logrotate's postrotate).
var reopenSignal os.Signal = syscall.SIGUSR1

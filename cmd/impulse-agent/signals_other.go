//go:build !unix

package main

import "os"

// reopenSignal is none where there is no SIGUSR1: a reload (SIGHUP, POST
// /v1/reload) reopens the access log file too.
var reopenSignal os.Signal

// brokenPipeSignal is none: only unix kills a process for writing to a
// closed pipe.
var brokenPipeSignal os.Signal

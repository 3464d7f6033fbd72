package consultest

import "syscall"

// sysProcAttr puts the agent in its own process group (Stop kills the group)
// and has the kernel kill it if the test binary dies without running its
// cleanups (a panic, a -timeout), so no agent outlives its test. Pdeathsig
// fires when the forking OS thread exits; Go keeps its threads unless a
// goroutine exits while locked with runtime.LockOSThread, which Start's
// callers do not do.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

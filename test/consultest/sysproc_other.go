//go:build !linux

package consultest

import "syscall"

// sysProcAttr puts the agent in its own process group (Stop kills the group).
// Without Linux's Pdeathsig an agent can outlive a crashed test binary.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

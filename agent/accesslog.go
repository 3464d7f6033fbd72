package agent

import "github.com/impulse-agent/impulse-agent/gateway/accesslog"

// ReopenAccessLog opens the access log's file again and writes to it from
// the next line on (SIGUSR1, after logrotate renamed it; a reload does it
// too). A failure is logged and returned; the old file stays in use.
// Without an access_log block, or with one writing to stdout or stderr,
// there is no file: that is logged, and nil returned.
func (a *Agent) ReopenAccessLog() error {
	// Held across the reopen: a reload does not switch the log meanwhile,
	// so the path logged is the one reopened.
	a.mu.Lock()
	defer a.mu.Unlock()
	switch al := a.cfg.AccessLog; {
	case al == nil:
		a.log.Info("access log: nothing to reopen: no access_log block")
		return nil
	case al.Path == accesslog.Stdout || al.Path == accesslog.Stderr:
		a.log.Info("access log: nothing to reopen: it writes to "+al.Path, "path", al.Path)
		return nil
	default:
		if err := a.gw.ReopenAccessLog(); err != nil {
			a.log.Error("access log: cannot reopen the file; still writing to the one open", "path", al.Path, "error", err)
			return err
		}
		a.log.Info("access log reopened", "path", al.Path)
		return nil
	}
}

package agent

// ReopenAccessLog opens the access log's file again and writes to it from
// the next line on (SIGUSR1, after logrotate renamed it; a reload does it
// too). A failure is logged and returned; the old file stays in use.
func (a *Agent) ReopenAccessLog() error {
	if err := a.gw.ReopenAccessLog(); err != nil {
		a.log.Error("access log: cannot reopen the file; still writing to the one open", "error", err)
		return err
	}
	a.log.Info("access log reopened")
	return nil
}

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestAccessLogStdoutReaderGone is `impulse-agent ... | head`: the access
// log goes to stdout, a pipe whose reader reads a line and closes it. The
// agent must not die of SIGPIPE (exit 141): it serves on, counts the lost
// lines in impulse_access_log_errors, logs the failure, and drains and
// exits 0 on SIGTERM. SIGUSR1 first: nothing to reopen, and the log says so.
func TestAccessLogStdoutReaderGone(t *testing.T) {
	be := newHTTP1Backend(t, "a")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	a := startAgentStdout(t, w, baseHCL()+"\naccess_log {\n  path = \"stdout\"\n}\n"+staticUpstreamHCL("web", "/", "", be))
	w.Close() // the agent holds the write end
	c, _ := newH3Client(t)

	mustGet(t, c, a.URL("/first"))
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil || !regexp.MustCompile(`^\{"time":".*"path":"/first"`).MatchString(line) {
		t.Fatalf("first access log line on stdout: %q, %v", line, err)
	}
	// SIGUSR1 has no file to reopen, and says so.
	a.Signal(syscall.SIGUSR1)
	a.waitLog(10*time.Second, "access log: nothing to reopen: it writes to stdout", nil)
	r.Close() // the reader goes away: the next writes get EPIPE

	errs := func() int {
		_, body := a.control("GET", "/metrics", nil)
		m := regexp.MustCompile(`(?m)^impulse_access_log_errors(?:\{[^}]*\})? (\S+)$`).FindSubmatch(body)
		if m == nil {
			return 0
		}
		n, _ := strconv.ParseFloat(string(m[1]), 64)
		return int(n)
	}
	waitFor(t, 15*time.Second, "lines counted in impulse_access_log_errors", func() bool {
		for i := range 10 {
			res, err := get(c, a.URL(fmt.Sprintf("/after/%d", i)))
			if a.Exited() {
				return true
			}
			if err != nil || res.Status != 200 {
				t.Fatalf("GET after the reader closed: %v %d", err, res.Status)
			}
		}
		return errs() > 0
	})
	if a.Exited() {
		t.Fatalf("the agent exited (%v) when its stdout's reader went away", a.state)
	}
	a.waitLog(10*time.Second, "access log: write failed; lines lost (reported at most once a minute; counted in impulse_access_log_errors)", nil)
	mustGet(t, c, a.URL("/still-serving"))
	a.Stop()
}

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestAccessLogReopenOnSIGUSR1 is logrotate against the built binary:
// while a client keeps sending, the access log is renamed and the agent
// gets SIGUSR1; the lines go on in a new file and every request served is
// a line in one of the two, or counted in impulse_access_log_dropped.
// SIGHUP (a reload) opens the file again too.
func TestAccessLogReopenOnSIGUSR1(t *testing.T) {
	be := newHTTP1Backend(t, "a")
	path := filepath.Join(t.TempDir(), "access.log")
	a := startAgent(t, baseHCL()+fmt.Sprintf("\naccess_log {\n  path = %q\n}\n", path)+staticUpstreamHCL("web", "/", "", be))
	c, _ := newH3Client(t)
	lines := func(p string) int {
		b, _ := os.ReadFile(p)
		return strings.Count(string(b), "\n")
	}

	var served atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if r, err := get(c, a.URL("/")); err != nil || r.Status != 200 {
				t.Errorf("GET: %v %d", err, r.Status)
				return
			}
			served.Add(1)
		}
	})
	waitFor(t, 10*time.Second, "lines in the access log", func() bool { return lines(path) >= 20 })
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	a.Signal(syscall.SIGUSR1)
	a.waitLog(10*time.Second, "access log reopened", nil)
	waitFor(t, 10*time.Second, "lines in the new file", func() bool { return lines(path) >= 20 })
	close(stop)
	wg.Wait()

	dropped := func() int {
		_, body := a.control("GET", "/metrics", nil)
		m := regexp.MustCompile(`(?m)^impulse_access_log_dropped(?:\{[^}]*\})? (\S+)$`).FindSubmatch(body)
		if m == nil {
			t.Fatalf("no impulse_access_log_dropped in /metrics:\n%s", body)
		}
		n, _ := strconv.ParseFloat(string(m[1]), 64)
		return int(n)
	}
	waitFor(t, 10*time.Second, "every request logged or counted", func() bool {
		return lines(path)+lines(path+".1")+dropped() == int(served.Load())
	})
	for _, p := range []string{path, path + ".1"} {
		f, _ := os.Open(p)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if !strings.HasPrefix(sc.Text(), `{"time":"`) || !strings.HasSuffix(sc.Text(), "}") {
				t.Errorf("%s: a line that is not whole: %q", filepath.Base(p), sc.Text())
			}
		}
		f.Close()
	}

	if err := os.Rename(path, path+".2"); err != nil {
		t.Fatal(err)
	}
	a.Signal(syscall.SIGHUP)
	a.waitLog(10*time.Second, "configuration reloaded", nil)
	mustGet(t, c, a.URL("/after-reload"))
	waitFor(t, 10*time.Second, "a line in the file the reload opened", func() bool { return lines(path) == 1 })
}

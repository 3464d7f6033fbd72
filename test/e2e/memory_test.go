package e2e

import (
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// rssBound is the most resident memory the agent may use while streaming
// 1 GiB through it. Measured on a 2-core machine: about 15 MiB idle and
// about 23 MiB peak during either transfer (see the test log); the bound leaves
// room for allocator and GC variance but would catch any buffering of a
// sizeable fraction of the body.
const rssBound = 64 * MiB

// TestFlatMemoryOneGiB streams 1 GiB down and 1 GiB up through the agent
// while sampling its VmRSS every 100 ms: the resident size must stay flat
// (below rssBound) and the byte counts and hashes must be exact.
//
// The HTTP/3 client is `impulse-agent probe` (a child process built without
// the race detector, like the agent), so the race-instrumented test process
// only generates, pipes and hashes bytes and the transfer takes seconds, not
// minutes.
func TestFlatMemoryOneGiB(t *testing.T) {
	const size = 1 << 30
	be := newHTTP1Backend(t, "gib-1")
	a := startAgent(t, baseHCL()+staticUpstreamHCL("gib", "/", "", be))
	idle, err := vmStatus(a.PID, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("agent VmRSS idle: %.1f MiB", float64(idle)/MiB)
	want := patternSHA256(size)

	t.Run("download", func(t *testing.T) {
		cmd := exec.Command(agentBin, "probe", "-cacert", certFile, "-timeout", "0", a.URL(fmt.Sprintf("/bytes?size=%d", size)))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		stop := sampleRSS(t, a.PID)
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		h := newCountingHash()
		_, copyErr := io.CopyBuffer(h, stdout, make([]byte, 1<<20))
		waitErr := cmd.Wait()
		el := time.Since(start)
		peak, samples := stop()
		if copyErr != nil || waitErr != nil {
			t.Fatalf("probe: %v / %v\n%s", copyErr, waitErr, stderr.String())
		}
		t.Logf("1 GiB down in %s (%.0f MiB/s); agent VmRSS peak %.1f MiB over %d samples",
			el.Round(time.Millisecond), float64(size)/MiB/el.Seconds(), float64(peak)/MiB, samples)
		if h.n != size || h.Sum() != want {
			t.Errorf("got %d bytes sha256 %s, want %d bytes %s", h.n, h.Sum(), size, want)
		}
		if peak > rssBound {
			t.Errorf("agent VmRSS peaked at %.1f MiB while streaming, bound %d MiB", float64(peak)/MiB, rssBound/MiB)
		}
	})

	t.Run("upload", func(t *testing.T) {
		cmd := exec.Command(agentBin, "probe", "-cacert", certFile, "-timeout", "0", "-d", "@-", a.URL("/upload"))
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stop := sampleRSS(t, a.PID)
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		_, copyErr := io.CopyBuffer(stdin, newPatternReader(size), make([]byte, 1<<20))
		stdin.Close()
		waitErr := cmd.Wait()
		el := time.Since(start)
		peak, samples := stop()
		if copyErr != nil || waitErr != nil {
			t.Fatalf("probe: %v / %v\n%s", copyErr, waitErr, stderr.String())
		}
		t.Logf("1 GiB up in %s (%.0f MiB/s); agent VmRSS peak %.1f MiB over %d samples",
			el.Round(time.Millisecond), float64(size)/MiB/el.Seconds(), float64(peak)/MiB, samples)
		if exp := fmt.Sprintf("bytes=%d sha256=%s", size, want); stdout.String() != exp {
			t.Errorf("backend received %q, want %q", stdout.String(), exp)
		}
		if peak > rssBound {
			t.Errorf("agent VmRSS peaked at %.1f MiB while streaming, bound %d MiB", float64(peak)/MiB, rssBound/MiB)
		}
	})

	if hwm, err := vmStatus(a.PID, "VmHWM"); err == nil {
		t.Logf("agent VmHWM (peak RSS over its life): %.1f MiB", float64(hwm)/MiB)
	}
	a.Stop()
}

// sampleRSS samples /proc/PID/status VmRSS every 100 ms until the returned
// stop is called, which reports the peak and the number of samples.
func sampleRSS(t *testing.T, pid int) (stop func() (peak int64, samples int)) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var peak int64
	var n int
	var sampleErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			rss, err := vmStatus(pid, "VmRSS")
			if err != nil {
				sampleErr = err
				return
			}
			n++
			peak = max(peak, rss)
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() (int64, int) {
		close(done)
		wg.Wait()
		if sampleErr != nil {
			t.Errorf("sampling VmRSS: %v", sampleErr)
		}
		return peak, n
	}
}

package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat. It
// is 100 on every Linux architecture Go supports (the kernel exports a
// fixed USER_HZ to user space whatever its internal HZ).
const clockTicks = 100

// ParseStatCPU returns utime+stime, in seconds, from the contents of a
// /proc/PID/stat file. The command name (field 2) is parenthesised and may
// itself contain spaces and parentheses, so fields are counted from the
// last ')'.
func ParseStatCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no ')' in %q", truncate(stat))
	}
	// After ")": field 3 (state) is rest[0]; utime is field 14, stime 15.
	rest := strings.Fields(string(stat[i+1:]))
	const utime, stime = 14 - 3, 15 - 3
	if len(rest) <= stime {
		return 0, fmt.Errorf("proc stat: %d fields after the command name, want > %d", len(rest), stime)
	}
	u, err := strconv.ParseUint(rest[utime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc stat: utime: %w", err)
	}
	s, err := strconv.ParseUint(rest[stime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc stat: stime: %w", err)
	}
	return float64(u+s) / clockTicks, nil
}

// ProcessCPU returns the CPU seconds (user + system, all threads) used so
// far by process pid.
func ProcessCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return ParseStatCPU(b)
}

// PIDsCPU sums ProcessCPU over pids.
func PIDsCPU(pids []int) (float64, error) {
	var sum float64
	for _, pid := range pids {
		c, err := ProcessCPU(pid)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// ParseStatusField returns a "kB" field ("VmRSS", "VmHWM") of a
// /proc/PID/status file, in bytes.
func ParseStatusField(status []byte, field string) (int64, error) {
	for line := range strings.Lines(string(status)) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || name != field {
			continue
		}
		f := strings.Fields(rest) // "12345 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("proc status: %s: unexpected %q", field, strings.TrimSpace(rest))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("proc status: %s: %w", field, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("proc status: no %s field", field)
}

// ProcessRSS returns the resident set size (VmRSS) of pid in bytes.
func ProcessRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return ParseStatusField(b, "VmRSS")
}

// SelfCPU returns the CPU time (user + system) used by this process.
func SelfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 {
		return time.Duration(t.Nano()).Seconds()
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

// rssSampler records the peak of the summed VmRSS of some processes,
// sampled every interval until stop.
type rssSampler struct {
	done chan struct{}
	out  chan int64
}

// sampleRSS starts sampling pids; stop returns the peak sum (0 if no
// sample succeeded).
func sampleRSS(pids []int, interval time.Duration) *rssSampler {
	s := &rssSampler{done: make(chan struct{}), out: make(chan int64, 1)}
	go func() {
		var peak int64
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			var sum int64
			for _, pid := range pids {
				if r, err := ProcessRSS(pid); err == nil {
					sum += r
				}
			}
			peak = max(peak, sum)
			select {
			case <-s.done:
				s.out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *rssSampler) stop() int64 {
	close(s.done)
	return <-s.out
}

func truncate(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

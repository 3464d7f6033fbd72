package main

import (
	"os"
	"strings"
	"testing"
)

// A real /proc/PID/stat line (kernel 6.x), utime 1234 and stime 567 ticks.
const statLine = "4242 (impulse-agent) S 1 4242 4242 0 -1 4194560 5120 0 0 0 1234 567 0 0 20 0 9 0 123456 1300000000 4000 18446744073709551615 1 1 0 0 0 0 0 0 2143420159 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n"

func TestParseStatCPU(t *testing.T) {
	got, err := ParseStatCPU([]byte(statLine))
	if err != nil {
		t.Fatal(err)
	}
	if want := (1234.0 + 567.0) / 100; got != want {
		t.Errorf("ParseStatCPU = %v, want %v", got, want)
	}
	// A command name with spaces and parentheses must not shift fields.
	tricky := strings.Replace(statLine, "(impulse-agent)", "(a b) (c) d)", 1)
	if got2, err := ParseStatCPU([]byte(tricky)); err != nil || got2 != got {
		t.Errorf("tricky comm: %v, %v; want %v", got2, err, got)
	}
	for _, bad := range []string{"", "4242 impulse-agent S 1", "4242 (x) S 1 2 3", strings.Replace(statLine, "1234", "x", 1)} {
		if _, err := ParseStatCPU([]byte(bad)); err == nil {
			t.Errorf("ParseStatCPU(%q) succeeded, want an error", bad)
		}
	}
}

func TestProcessCPUSelf(t *testing.T) {
	// Burn a little CPU so the counter is very likely non-zero.
	x := 0
	for i := range 50_000_000 {
		x += i
	}
	_ = x
	c, err := ProcessCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if c < 0 {
		t.Errorf("ProcessCPU(self) = %v", c)
	}
	if _, err := ProcessCPU(1 << 30); err == nil {
		t.Error("ProcessCPU of a missing PID succeeded")
	}
}

func TestParseStatusField(t *testing.T) {
	status := "Name:\timpulse-agent\nVmPeak:\t 1300000 kB\nVmHWM:\t   40960 kB\nVmRSS:\t   20480 kB\nThreads:\t9\n"
	rss, err := ParseStatusField([]byte(status), "VmRSS")
	if err != nil || rss != 20480<<10 {
		t.Errorf("VmRSS = %d, %v; want %d", rss, err, 20480<<10)
	}
	hwm, err := ParseStatusField([]byte(status), "VmHWM")
	if err != nil || hwm != 40960<<10 {
		t.Errorf("VmHWM = %d, %v", hwm, err)
	}
	if _, err := ParseStatusField([]byte(status), "VmSwap"); err == nil {
		t.Error("missing field: want an error")
	}
	if _, err := ParseStatusField([]byte("VmRSS:\t12 MB\n"), "VmRSS"); err == nil {
		t.Error("unit other than kB: want an error")
	}
	if r, err := ProcessRSS(os.Getpid()); err != nil || r <= 0 {
		t.Errorf("ProcessRSS(self) = %d, %v", r, err)
	}
}

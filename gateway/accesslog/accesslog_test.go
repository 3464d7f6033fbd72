package accesslog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lockedBuffer is an io.Writer tests can read while the writer writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// jsonLines counts s's lines, failing the test on one that is not JSON.
func jsonLines(t *testing.T, s string) int {
	t.Helper()
	n := 0
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		n++
	}
	return n
}

func mustOpen(t *testing.T, cfg Config) *Output {
	t.Helper()
	o, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func closeLog(t *testing.T, l *Log) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestDropsWhenWriterBlocked: with the output a pipe nobody reads, Log
// keeps returning and counts what does not fit; once the pipe is read,
// every line not counted as dropped arrives.
func TestDropsWhenWriterBlocked(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var stats Stats
	l := New(mustOpen(t, Config{Path: "pipe", Writer: pw, Buffer: 64}), Options{Stats: &stats})
	const n = 20000 // far more than the pipe (64 KiB) and the buffer hold
	e := sampleEntry()
	for range n {
		l.Log(&e) // returns: a blocked writer never blocks the caller
	}
	if stats.Dropped.Load() == 0 {
		t.Fatal("nothing dropped while the writer was blocked")
	}
	read := make(chan string)
	go func() {
		b, _ := io.ReadAll(pr)
		read <- string(b)
	}()
	closeLog(t, l)
	pw.Close()
	got := jsonLines(t, <-read)
	if uint64(got)+stats.Dropped.Load() != n || stats.Errors.Load() != 0 {
		t.Fatalf("%d lines + %d dropped (%d errors), want %d", got, stats.Dropped.Load(), stats.Errors.Load(), n)
	}
}

// fullDisk is a writer with room for so many bytes: a write beyond it is
// cut short with ENOSPC, as a file on a full filesystem.
type fullDisk struct {
	mu   sync.Mutex
	room int
	b    bytes.Buffer
}

func (f *fullDisk) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(p) <= f.room {
		f.room -= len(p)
		return f.b.Write(p)
	}
	n := f.room
	f.b.Write(p[:n])
	f.room = 0
	return n, &os.PathError{Op: "write", Path: "access.log", Err: syscall.ENOSPC}
}

func (f *fullDisk) free(n int) {
	f.mu.Lock()
	f.room += n
	f.mu.Unlock()
}

func (f *fullDisk) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.b.String()
}

// TestWriteFailuresCounted: lines a full disk refuses, a line cut in the
// middle included, are counted in Errors and logged once a minute at most;
// when space comes back the lines after are whole again.
func TestWriteFailuresCounted(t *testing.T) {
	e := sampleEntry()
	lineLen := len(appendJSON(nil, &e, false))
	disk := &fullDisk{room: 3*lineLen + lineLen/2}
	var logs lockedBuffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	var stats Stats
	l := New(mustOpen(t, Config{Path: "access.log", Writer: disk}), Options{Stats: &stats, Logger: logger})
	// One line at a time: each is written or counted before the next.
	handled := func() uint64 { return uint64(strings.Count(disk.String(), "\n")) + stats.Errors.Load() }
	for i := range 10 {
		l.Log(&e)
		waitFor(t, func() bool { return handled() == uint64(i+1) }, "the line written or counted")
	}
	disk.free(10 * lineLen)
	for range 5 {
		l.Log(&e)
	}
	closeLog(t, l)
	// Whole lines: 3 before the disk filled, 5 after; the fragment of the
	// fourth ends with the newline written before them.
	var whole int
	for _, line := range strings.Split(strings.TrimSuffix(disk.String(), "\n"), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			whole++
		}
	}
	if whole != 8 || stats.Errors.Load() != 7 || stats.Dropped.Load() != 0 {
		t.Fatalf("%d whole lines, %d errors, %d dropped; want 8, 7, 0\n%s", whole, stats.Errors.Load(), stats.Dropped.Load(), disk.String())
	}
	if n := strings.Count(logs.String(), "[ERROR]"); n != 1 {
		t.Fatalf("%d error reports, want 1 (once a minute)\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("the report does not say why:\n%s", logs.String())
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSwitchLosesNoLine: outputs switched while several goroutines log:
// every line is whole, in one output or counted as dropped.
func TestSwitchLosesNoLine(t *testing.T) {
	outs := make([]*lockedBuffer, 20)
	for i := range outs {
		outs[i] = &lockedBuffer{}
	}
	var stats Stats
	l := New(mustOpen(t, Config{Path: "0", Writer: outs[0], Buffer: 256}), Options{Stats: &stats})
	const workers, each = 4, 5000
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			e := sampleEntry()
			for range each {
				l.Log(&e)
			}
		})
	}
	for i := 1; i < len(outs); i++ {
		l.Switch(mustOpen(t, Config{Path: "n", Writer: outs[i]}))
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	closeLog(t, l)
	total, used := 0, 0
	for _, o := range outs {
		n := jsonLines(t, o.String())
		total += n
		if n > 0 {
			used++
		}
	}
	if uint64(total)+stats.Dropped.Load() != workers*each {
		t.Fatalf("%d lines + %d dropped, want %d", total, stats.Dropped.Load(), workers*each)
	}
	if used < 2 {
		t.Fatalf("lines went to %d outputs; the switches did nothing", used)
	}
}

// TestReopenFile: after a rename, Reopen creates the file again and the
// lines go on there; none is lost.
func TestReopenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	var stats Stats
	l := New(mustOpen(t, Config{Path: path, Format: FormatCombined}), Options{Stats: &stats})
	e := sampleEntry()
	for range 100 {
		l.Log(&e)
	}
	if err := os.Rename(path, path+".1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	// Lines queued before the switch may still go to the renamed file (the
	// writer switches between batches); once it caught up, lines reach the
	// new one.
	logged := 100
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.Log(&e)
		logged++
		if fi, err := os.Stat(path); err == nil && fi.Size() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no line reached the reopened file")
		}
		time.Sleep(time.Millisecond)
	}
	closeLog(t, l)
	old, _ := os.ReadFile(path + ".1")
	cur, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(string(old), "\n") + strings.Count(string(cur), "\n")
	if uint64(n)+stats.Dropped.Load() != uint64(logged) {
		t.Fatalf("%d + %d lines, %d dropped; want %d in all", strings.Count(string(old), "\n"), strings.Count(string(cur), "\n"), stats.Dropped.Load(), logged)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != FileMode {
		t.Errorf("mode %v, want %v", fi.Mode().Perm(), os.FileMode(FileMode))
	}
	if !strings.HasPrefix(string(cur), `192.0.2.7 - - [`) {
		t.Errorf("the reopened file is not in the combined format: %q", cur)
	}
	// Reopen fails when the directory went: the log keeps its file.
	l3dir := t.TempDir()
	l3 := New(mustOpen(t, Config{Path: filepath.Join(l3dir, "a.log")}), Options{})
	os.RemoveAll(l3dir)
	var oe *OpenError
	if err := l3.Reopen(); !errors.As(err, &oe) || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Reopen in a removed directory: %v, want an *OpenError (ENOENT)", err)
	}
	closeLog(t, l3)
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	var oe *OpenError
	if _, err := Open(Config{Path: filepath.Join(dir, "missing", "a.log")}); !errors.As(err, &oe) || !errors.Is(err, syscall.ENOENT) {
		t.Errorf("missing directory: %v", err)
	}
	if _, err := Open(Config{Path: dir}); !errors.As(err, &oe) || !errors.Is(err, syscall.EISDIR) {
		t.Errorf("a directory: %v", err)
	}
	if _, err := Open(Config{Path: Stdout, Format: "clf"}); err == nil || !strings.Contains(err.Error(), `"clf"`) {
		t.Errorf("unknown format: %v", err)
	}
}

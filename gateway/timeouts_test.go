package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

func TestIdleVerdict(t *testing.T) {
	const timeout = time.Second
	for _, c := range []struct {
		name    string
		reading bool
		waited  time.Duration
		trip    bool
		next    time.Duration
	}{
		{"no read in progress", false, 0, false, timeout},
		{"no read, stale wait ignored", false, 5 * timeout, false, timeout},
		{"read just started", true, 0, false, timeout},
		{"read partway", true, 300 * time.Millisecond, false, 700 * time.Millisecond},
		{"read one tick short", true, timeout - 1, false, 1},
		{"read at the timeout", true, timeout, true, 0},
		{"read past the timeout", true, 3 * timeout, true, 0},
	} {
		trip, next := idleVerdict(c.reading, c.waited, timeout)
		if trip != c.trip || (!trip && next != c.next) {
			t.Errorf("%s: idleVerdict(%v, %v, %v) = %v, %v; want %v, %v", c.name, c.reading, c.waited, timeout, trip, next, c.trip, c.next)
		}
	}
}

// pipeBody is a response body fed by a test through an io.Pipe, counting
// its closes.
type pipeBody struct {
	*io.PipeReader
	closes atomic.Int32
}

func (p *pipeBody) Close() error { p.closes.Add(1); return p.PipeReader.Close() }

// idleWatched is a response whose body w feeds, under an unpooled watch.
func idleWatched(timeout time.Duration) (*http.Response, *pipeBody, *io.PipeWriter, *bodyIdle) {
	pr, pw := io.Pipe()
	pb := &pipeBody{PipeReader: pr}
	resp := &http.Response{Body: pb}
	return resp, pb, pw, newBodyIdle().start(resp, timeout)
}

// TestBodyIdleCutsAStalledBody: a body that stops mid-way is closed once a
// read has waited for the timeout, measured from that read's start (not
// from the timer's period), and the read fails with errBodyIdleTimeout.
func TestBodyIdleCutsAStalledBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		resp, pb, pw, idle := idleWatched(timeout)
		defer idle.release(resp)
		go func() {
			time.Sleep(700 * time.Millisecond)
			pw.Write([]byte("half"))
		}()
		buf := make([]byte, 16)
		if n, err := resp.Body.Read(buf); n != 4 || err != nil {
			t.Fatalf("first read: %d %v", n, err)
		}
		stalled := time.Now()
		_, err := resp.Body.Read(buf)
		if !errors.Is(err, errBodyIdleTimeout) {
			t.Fatalf("stalled read: %v, want errBodyIdleTimeout", err)
		}
		if waited := time.Since(stalled); waited != timeout {
			t.Errorf("cut after %v, want %v", waited, timeout)
		}
		if !idle.timedOut() || pb.closes.Load() != 1 {
			t.Errorf("timedOut %v, body closed %d times", idle.timedOut(), pb.closes.Load())
		}
	})
}

// TestBodyIdleSparesASlowBody: a byte every timeout/3 for 3 × timeout is
// never cut, nor is time spent outside Read (a slow client) counted.
func TestBodyIdleSparesASlowBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 300 * time.Millisecond
		resp, pb, pw, idle := idleWatched(timeout)
		go func() {
			for range 9 {
				time.Sleep(timeout / 3)
				pw.Write([]byte("x"))
			}
			pw.Write([]byte("after the pause"))
			pw.Close()
		}()
		buf := make([]byte, 64)
		var got []byte
		for {
			n, err := resp.Body.Read(buf)
			got = append(got, buf[:n]...)
			if len(got) == 9 {
				time.Sleep(5 * timeout) // the copy loop waits on the client
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("after %d bytes: %v", len(got), err)
			}
		}
		if string(got) != "xxxxxxxxxafter the pause" || idle.timedOut() {
			t.Errorf("got %q, timed out %v", got, idle.timedOut())
		}
		idle.release(resp)
		if resp.Body != io.ReadCloser(pb) {
			t.Error("release did not restore the transport body")
		}
		time.Sleep(10 * timeout)
		if pb.closes.Load() != 0 {
			t.Error("the watch closed the body after release")
		}
	})
}

// TestBodyIdleReuse: a watch used again (as the pool does) after a release
// with its timer due watches only its new body, from its new start.
func TestBodyIdleReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = time.Second
		resp1, pb1, pw1, idle := idleWatched(timeout)
		go pw1.Write([]byte("one"))
		if _, err := resp1.Body.Read(make([]byte, 8)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(timeout - time.Millisecond)
		idle.release(resp1)

		pr2, pw2 := io.Pipe()
		defer pw2.Close()
		pb2 := &pipeBody{PipeReader: pr2}
		resp2 := &http.Response{Body: pb2}
		idle.start(resp2, timeout)
		defer idle.release(resp2)
		stalled := time.Now()
		if _, err := resp2.Body.Read(make([]byte, 8)); !errors.Is(err, errBodyIdleTimeout) || time.Since(stalled) != timeout {
			t.Errorf("reused watch: %v after %v, want errBodyIdleTimeout after %v", err, time.Since(stalled), timeout)
		}
		if pb1.closes.Load() != 0 || pb2.closes.Load() != 1 {
			t.Errorf("closes: first body %d, second %d; want 0, 1", pb1.closes.Load(), pb2.closes.Load())
		}
	})
}

func TestWatchBodyIdleSkipsEmptyBodies(t *testing.T) {
	for _, body := range []io.ReadCloser{nil, http.NoBody} {
		resp := &http.Response{Body: body}
		if b := watchBodyIdle(resp, time.Second); b != nil || resp.Body != body {
			t.Errorf("body %v: watched", body)
		}
		var b *bodyIdle
		b.release(resp) // a nil watch is a no-op
		if b.timedOut() {
			t.Error("nil watch timed out")
		}
	}
}

func TestRequestDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent := context.Background()
		ctx, stop := requestDeadline(parent, 0)
		stop()
		if ctx != parent {
			t.Fatal("no timeout derived a context")
		}
		ctx, stop = requestDeadline(parent, 2*time.Second)
		defer stop()
		start := time.Now()
		child, cancel := context.WithCancelCause(ctx) // an attempt's own context
		defer cancel(nil)
		if requestTimedOut(child) {
			t.Fatal("timed out at once")
		}
		<-child.Done()
		if !requestTimedOut(child) || !requestTimedOut(ctx) || time.Since(start) != 2*time.Second {
			t.Errorf("after %v: child %v, ctx %v", time.Since(start), context.Cause(child), context.Cause(ctx))
		}
		other, cancelOther := context.WithCancel(parent)
		cancelOther()
		if requestTimedOut(other) {
			t.Error("a client cancel taken for the request timeout")
		}
	})
}

// BenchmarkBodyIdle is the watch's cost per response when nothing trips:
// a 64-byte body read to its end under a pooled watch. It must stay under
// 1 µs and 0 allocations.
func BenchmarkBodyIdle(b *testing.B) {
	data := bytes.Repeat([]byte("x"), 64)
	rd := bytes.NewReader(data)
	body := io.NopCloser(rd)
	buf := make([]byte, 128)
	resp := &http.Response{}
	b.ReportAllocs()
	for b.Loop() {
		rd.Reset(data)
		resp.Body = body
		idle := watchBodyIdle(resp, time.Minute)
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				break
			}
		}
		idle.release(resp)
	}
}

// BenchmarkRequestDeadlineNone: without a request timeout the deadline
// costs nothing.
func BenchmarkRequestDeadlineNone(b *testing.B) {
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c, stop := requestDeadline(ctx, 0)
		if requestTimedOut(c) {
			b.Fatal("timed out")
		}
		stop()
	}
}

// TestReloadChangesTheLadderInPlace: an Apply that changes only body_idle
// and request keeps the upstream (and its backends' health and
// connections); the next request gets the new values.
func TestReloadChangesTheLadderInPlace(t *testing.T) {
	be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	uc := staticUpstream("u", "/", be)
	g, err := New(Config{Upstreams: []UpstreamConfig{uc}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown(context.Background())
	before := g.table.Load().upstreams["u"]
	if c := g.table.Load().configs["u"]; c.bodyIdleTimeout() != DefaultBodyIdleTimeout || c.RequestTimeout != 0 {
		t.Fatalf("defaults: body_idle %v, request %v", c.bodyIdleTimeout(), c.RequestTimeout)
	}
	uc.BodyIdleTimeout, uc.RequestTimeout = time.Second, 2*time.Second
	if err := g.Apply(context.Background(), Config{Upstreams: []UpstreamConfig{uc}}); err != nil {
		t.Fatal(err)
	}
	tbl := g.table.Load()
	if tbl.upstreams["u"] != before {
		t.Error("a new ladder rebuilt the upstream")
	}
	if c := tbl.configs["u"]; c.bodyIdleTimeout() != time.Second || c.RequestTimeout != 2*time.Second {
		t.Errorf("after the reload: body_idle %v, request %v", c.bodyIdleTimeout(), c.RequestTimeout)
	}
}

package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/answer"
	"github.com/impulse-agent/impulse-agent/gateway/concurrency"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// limiterOf is the concurrency limiter of the named upstream.
func limiterOf(g *Gateway, name string) *concurrency.Limiter { return g.table.Load().limiters[name] }

// overloadedCount is the overloaded counter of scope and upstream.
func overloadedCount(g *Gateway, scope, up string) uint64 {
	return g.obs.Metrics.Overloads(scope, up)
}

// checkOverloaded fails unless res is 503 overloaded with Retry-After: 1.
func checkOverloaded(t *testing.T, res asyncResult, what string) {
	t.Helper()
	if res.err != nil {
		t.Fatalf("%s: %v", what, res.err)
	}
	if res.resp.StatusCode != http.StatusServiceUnavailable || res.resp.Header.Get("X-Impulse-Error") != answer.Overloaded.Reason ||
		res.resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("%s: %d %q, Retry-After %q; want 503 overloaded, Retry-After 1", what, res.resp.StatusCode,
			res.resp.Header.Get("X-Impulse-Error"), res.resp.Header.Get("Retry-After"))
	}
}

func checkOK(t *testing.T, res asyncResult, what string) {
	t.Helper()
	if res.err != nil || res.resp.StatusCode != http.StatusOK {
		if res.err == nil {
			t.Fatalf("%s: %d %q", what, res.resp.StatusCode, res.resp.Header.Get("X-Impulse-Error"))
		}
		t.Fatalf("%s: %v", what, res.err)
	}
}

// awaitResult receives one result within 10 s.
func awaitResult(t *testing.T, c <-chan asyncResult, what string) asyncResult {
	t.Helper()
	select {
	case res := <-c:
		return res
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer in 10s", what)
		return asyncResult{}
	}
}

// TestR06FailFast is case R06 without a queue: max_requests = 10, a backend
// that does not answer, 50 concurrent requests. 10 reach the backend; the
// 40 others get 503 overloaded with Retry-After at once (while the 10 are
// still held) and never reach it; then the 10 are served and the count
// returns to 0.
func TestR06FailFast(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := testbackend.NewStall(t)
		uc := staticUpstream("u", "/", be.Server)
		uc.MaxRequests = 10
		h := newHarnessOver(t, proto, uc)
		lim := limiterOf(h.gw, "u")
		var held []<-chan asyncResult
		for range 10 {
			held = append(held, h.getAsync("/slow"))
		}
		eventually(t, 10*time.Second, func() bool { return lim.InFlight() == 10 && be.Arrived.Load() == 10 }, "10 requests in flight")
		var extra []<-chan asyncResult
		for range 40 {
			extra = append(extra, h.getAsync("/slow"))
		}
		for i, c := range extra {
			checkOverloaded(t, awaitResult(t, c, "extra request"), fmt.Sprintf("extra request %d", i))
		}
		if n := be.Arrived.Load(); n != 10 {
			t.Fatalf("backend saw %d requests, want 10", n)
		}
		if n := overloadedCount(h.gw, scopeUpstream, "u"); n != 40 {
			t.Fatalf("overloaded counter %d, want 40", n)
		}
		be.Free(10)
		for _, c := range held {
			checkOK(t, awaitResult(t, c, "held request"), "held request")
		}
		eventually(t, 5*time.Second, func() bool { return lim.InFlight() == 0 }, "the in-flight count back at 0")
	})
}

// TestR06QueueWaits: with max_queue, requests over the limit wait in line
// (never more than max_queue of them: the next is refused at once) and
// proceed in turn as slots free.
func TestR06QueueWaits(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := testbackend.NewStall(t)
		uc := staticUpstream("u", "/", be.Server)
		uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout = 2, 3, 30*time.Second
		h := newHarnessOver(t, proto, uc)
		lim := limiterOf(h.gw, "u")
		var all []<-chan asyncResult
		for range 2 {
			all = append(all, h.getAsync("/"))
		}
		eventually(t, 10*time.Second, func() bool { return be.Arrived.Load() == 2 }, "2 requests at the backend")
		for range 3 {
			all = append(all, h.getAsync("/"))
		}
		eventually(t, 10*time.Second, func() bool { return lim.Waiting() == 3 }, "3 requests queued")
		checkOverloaded(t, awaitResult(t, h.getAsync("/"), "request beyond the queue"), "request beyond the queue")
		if lim.Waiting() != 3 || be.Arrived.Load() != 2 {
			t.Fatalf("waiting %d, backend saw %d", lim.Waiting(), be.Arrived.Load())
		}
		for want := int64(3); want <= 5; want++ {
			be.Free(1) // one request ends: the head of the line takes its slot
			eventually(t, 10*time.Second, func() bool { return be.Arrived.Load() == want && lim.Waiting() == 5-want }, "the next queued request at the backend")
		}
		be.Free(2)
		for _, c := range all {
			checkOK(t, awaitResult(t, c, "request"), "request")
		}
		eventually(t, 5*time.Second, func() bool { return lim.InFlight() == 0 && lim.Waiting() == 0 }, "nothing in flight or queued")
	})
}

// TestR06QueueWaves is case R06 with a queue: max_requests = 10 and room
// for the rest in line, a backend that takes a while, 50 concurrent
// requests: all are served, in about five waves.
func TestR06QueueWaves(t *testing.T) {
	const wave = 100 * time.Millisecond
	forEachProtocol(t, func(t *testing.T, proto string) {
		var mu sync.Mutex
		inFlight, peak := 0, 0
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			inFlight++
			peak = max(peak, inFlight)
			mu.Unlock()
			time.Sleep(wave) // the backend's work, not a wait for a condition
			mu.Lock()
			inFlight--
			mu.Unlock()
		}))
		uc := staticUpstream("u", "/", be)
		uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout = 10, 40, 30*time.Second
		h := newHarnessOver(t, proto, uc)
		start := time.Now()
		var all []<-chan asyncResult
		for range 50 {
			all = append(all, h.getAsync("/"))
		}
		for _, c := range all {
			checkOK(t, awaitResult(t, c, "request"), "request")
		}
		if d := time.Since(start); d < 5*wave {
			t.Fatalf("50 requests in %v: fewer than five waves of %v", d, wave)
		}
		if peak > 10 {
			t.Fatalf("the backend had %d requests at once, max_requests 10", peak)
		}
	})
}

// TestR06QueueTimeout: a request that waits queue_timeout in line gets
// 503 overloaded and leaves it.
func TestR06QueueTimeout(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := testbackend.NewStall(t)
		uc := staticUpstream("u", "/", be.Server)
		uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout = 1, 1, 200*time.Millisecond
		h := newHarnessOver(t, proto, uc)
		lim := limiterOf(h.gw, "u")
		held := h.getAsync("/")
		eventually(t, 10*time.Second, func() bool { return be.Arrived.Load() == 1 }, "a request at the backend")
		start := time.Now()
		checkOverloaded(t, awaitResult(t, h.getAsync("/"), "queued request"), "queued request")
		if d := time.Since(start); d < 200*time.Millisecond {
			t.Fatalf("refused after %v, before queue_timeout", d)
		}
		if lim.Waiting() != 0 || be.Arrived.Load() != 1 {
			t.Fatalf("waiting %d, backend saw %d", lim.Waiting(), be.Arrived.Load())
		}
		be.Free(1)
		checkOK(t, awaitResult(t, held, "held request"), "held request")
	})
}

// TestR06ClientLeavesQueue: a client that goes away while queued leaves
// the line (no leak, nothing reaches the backend), and the place is free
// for the next one.
func TestR06ClientLeavesQueue(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		be := testbackend.NewStall(t)
		uc := staticUpstream("u", "/", be.Server)
		uc.MaxRequests, uc.MaxQueue, uc.QueueTimeout = 1, 1, 30*time.Second
		h := newHarnessOver(t, proto, uc)
		lim := limiterOf(h.gw, "u")
		held := h.getAsync("/")
		eventually(t, 10*time.Second, func() bool { return be.Arrived.Load() == 1 }, "a request at the backend")
		ctx, cancel := context.WithCancel(context.Background())
		gone := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.base+"/", nil)
			resp, err := h.client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			gone <- err
		}()
		eventually(t, 10*time.Second, func() bool { return lim.Waiting() == 1 }, "a request queued")
		cancel()
		if err := <-gone; !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled request: %v", err)
		}
		eventually(t, 10*time.Second, func() bool { return lim.Waiting() == 0 }, "the canceled request out of the queue")
		next := h.getAsync("/")
		eventually(t, 10*time.Second, func() bool { return lim.Waiting() == 1 }, "the next request queued")
		be.Free(2)
		checkOK(t, awaitResult(t, held, "held request"), "held request")
		checkOK(t, awaitResult(t, next, "next request"), "next request")
		if n := be.Arrived.Load(); n != 2 {
			t.Fatalf("backend saw %d requests, want 2 (not the canceled one)", n)
		}
		eventually(t, 5*time.Second, func() bool { return lim.InFlight() == 0 }, "nothing in flight")
	})
}

// TestR06OverloadedUploadAnsweredAtOnce: an HTTP/1.1 upload over the limit
// gets its 503 without sending its body (with and without Expect:
// 100-continue), as the refusal comes before the body is wrapped.
func TestR06OverloadedUploadAnsweredAtOnce(t *testing.T) {
	be := testbackend.NewStall(t)
	uc := staticUpstream("u", "/", be.Server)
	uc.MaxRequests = 1
	h := newHarnessOver(t, ProtocolH1, uc)
	held := h.getAsync("/slow")
	eventually(t, 10*time.Second, func() bool { return be.Arrived.Load() == 1 }, "the slot held")
	for _, expect := range []string{"", "Expect: 100-continue\r\n"} {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(h.base, "https://"), &tls.Config{RootCAs: h.cert.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(conn, "POST /up HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000\r\n"+expect+"\r\n")
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound, not a wait: the answer comes at once
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Impulse-Error") != "overloaded" {
			t.Fatalf("%q: %v %v", expect, resp, err)
		}
		conn.Close()
	}
	be.Free(1)
	checkOK(t, awaitResult(t, held, "held request"), "held request")
}

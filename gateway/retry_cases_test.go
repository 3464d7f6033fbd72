package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/balance"
	"github.com/impulse-agent/impulse-agent/gateway/health"
	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// retryOn is the default retry policy with attempts and, when given, the
// conditions on (instead of the default ones).
func retryOn(attempts int, on ...retry.Condition) retry.Policy {
	p := retry.Default()
	p.Attempts = attempts
	if len(on) > 0 {
		p.On = 0
		for _, c := range on {
			p.On |= c
		}
	}
	return p
}

// counted is the value of one retry or hedge counter of g.
func counted(g *Gateway, c observe.AttemptCounter, upstream, reason string) uint64 {
	return g.obs.Metrics.Attempts(c, upstream, reason)
}

// closedPort is a backend spec whose port refuses connections.
func closedPort(t *testing.T, id, scheme string) upstream.Spec {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return upstream.Spec{ID: id, Scheme: scheme, Host: "127.0.0.1", Port: port, Weight: 1}
}

// sendOne makes one request with a request id (and a body for POST and PUT)
// and returns its status and body; 0 when the request or its response body
// failed.
func sendOne(t *testing.T, h *harness, method, path, id string, bodyLen int) (int, string) {
	t.Helper()
	var rd io.Reader
	if bodyLen > 0 {
		rd = bytes.NewReader(bytes.Repeat([]byte("b"), bodyLen))
	}
	req, _ := http.NewRequest(method, h.base+path, rd)
	req.Header.Set("X-Request-Id", id)
	if bodyLen > 0 {
		req.Header.Set("X-Body-Len", strconv.Itoa(bodyLen))
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Logf("%s %s: %v", method, path, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "" // reset mid-body
	}
	return resp.StatusCode, string(b)
}

// TestR02RetryGoesToAnotherBackend: with a backend whose port is closed and
// a good one, every request succeeds, POSTs with a body included (a refused
// connection proves the backend never saw the request); the retry reaches
// the other backend, each request exactly once there, and
// impulse_retries{reason="connect-failure"} counts the retries. For HTTP/1.1
// and HTTP/2 backends, over every ingress protocol.
func TestR02RetryGoesToAnotherBackend(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		for _, scheme := range []string{"http", "https"} {
			t.Run(scheme, func(t *testing.T) {
				good := new(testbackend.Counter)
				var srv *httptest.Server
				if scheme == "https" {
					srv = testbackend.NewH2(t, testbackend.OK(good))
				} else {
					srv = testbackend.NewH1(t, testbackend.OK(good))
				}
				uc := staticUpstream("u", "/", srv)
				uc.Static = append(uc.Static, closedPort(t, "closed", scheme))
				h := newHarnessOver(t, ingress, uc)
				const n = 20
				for i := range n {
					method, bodyLen := "GET", 0
					if i%2 == 1 {
						method, bodyLen = "POST", 4096
					}
					id := strconv.Itoa(i)
					if code, body := sendOne(t, h, method, "/r02", id, bodyLen); code != 200 || body != "ok" {
						t.Fatalf("%s %d: %d %q, want 200 ok", method, i, code, body)
					}
					if got := good.Of(method + " " + id); got != 1 {
						t.Fatalf("%s %d reached the good backend %d times, want once", method, i, got)
					}
				}
				if good.Bad.Load() != 0 {
					t.Errorf("%d bodies reached the good backend cut short", good.Bad.Load())
				}
				var closed *BackendInfo
				for _, bi := range h.gw.Backends() {
					if bi.ID == "closed" {
						closed = &bi
					}
				}
				retries := counted(h.gw, observe.Retried, "u", "connect-failure")
				if closed == nil || retries == 0 || retries != closed.Requests {
					t.Fatalf("retries counted %d; the closed backend was tried %+v: want one retry per try there", retries, closed)
				}
			})
		}
	})
}

// TestR02ResetIsRetriedWhenAsked: with on = ["reset"], a GET whose backend
// resets the connection before answering goes to the other backend, never
// back to one that failed it: two of three backends reset, and each sees a
// request at most once.
func TestR02ResetIsRetriedWhenAsked(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		bad1, bad2, good := new(testbackend.Counter), new(testbackend.Counter), new(testbackend.Counter)
		uc := staticUpstream("u", "/", testbackend.NewH1(t, testbackend.Reset(bad1)), testbackend.NewH1(t, testbackend.Reset(bad2)), testbackend.NewH1(t, testbackend.OK(good)))
		uc.Retry = retryOn(3, retry.ConnectFailure, retry.Reset)
		h := newHarnessOver(t, ingress, uc)
		for i := range 15 {
			id := strconv.Itoa(i)
			if code, _ := sendOne(t, h, "GET", "/r02", id, 0); code != 200 {
				t.Fatalf("GET %d: %d, want 200", i, code)
			}
			if bad1.Of("GET "+id) > 1 || bad2.Of("GET "+id) > 1 || good.Of("GET "+id) != 1 {
				t.Fatalf("GET %d reached the backends %d, %d and %d times: a retry went back to a failed one",
					i, bad1.Of("GET "+id), bad2.Of("GET "+id), good.Of("GET "+id))
			}
		}
		if got, want := counted(h.gw, observe.Retried, "u", "reset"), uint64(bad1.Total.Load()+bad2.Total.Load()); got != want {
			t.Errorf("impulse_retries{reason=reset} = %d, want %d (one per failed try)", got, want)
		}
	})
}

// TestR03RetriesNeverReplayUnsafe: with every opt-in condition on, a POST
// or PATCH whose backend reset the connection after reading it is answered
// 502 and a PUT that timed out after being read 504 (per_try_timeout) —
// only when their method is not idempotent; a GET and a PUT are retried
// and succeed, the PUT's body replayed whole; a response that started is
// never retried: a GET whose backend fails mid-body is reset and the other
// backend sees nothing.
func TestR03RetriesNeverReplayUnsafe(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		bad, good := new(testbackend.Counter), new(testbackend.Counter)
		badHandler := func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/stall":
				bad.Note(r)
				<-r.Context().Done() // never answers
			case "/midbody":
				bad.Note(r)
				w.Header().Set("Content-Length", "100")
				w.Write([]byte("partial"))
				w.(http.Flusher).Flush()
				if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
					c.Close()
				}
			default:
				testbackend.Reset(bad)(w, r)
			}
		}
		uc := staticUpstream("u", "/", testbackend.NewH1(t, http.HandlerFunc(badHandler)), testbackend.NewH1(t, testbackend.OK(good)))
		uc.Retry = retryOn(2, retry.ConnectFailure, retry.RefusedStream, retry.Reset, retry.Status502, retry.Status503, retry.Status504)
		uc.Retry.PerTryTimeout = 300 * time.Millisecond
		// The bad backend first, always: weights make round robin send
		// nearly every first try there.
		uc.Static[0].Weight, uc.Static[1].Weight = 1000, 1
		h := newHarnessOver(t, ingress, uc)
		for i, tc := range []struct {
			method, path string
			bodyLen      int
			want         int // 0: the stream is reset
			retried      bool
		}{
			{"POST", "/reset", 2048, 502, false},
			{"PATCH", "/reset", 2048, 502, false},
			{"POST", "/stall", 2048, 504, false},
			{"GET", "/reset", 0, 200, true},
			{"PUT", "/reset", 2048, 200, true},
			{"PUT", "/stall", 2048, 200, true},
			{"DELETE", "/stall", 0, 200, true},
			{"GET", "/midbody", 0, 0, false},
		} {
			id := "r03-" + strconv.Itoa(i)
			if bad.Of(tc.method+" "+id) != 0 {
				t.Fatal("id reused")
			}
			code, _ := sendOne(t, h, tc.method, tc.path, id, tc.bodyLen)
			if bad.Of(tc.method+" "+id) == 0 {
				continue // round robin sent it to the good backend first: nothing to see
			}
			if code != tc.want {
				t.Errorf("%s %s: %d, want %d", tc.method, tc.path, code, tc.want)
			}
			if got := good.Of(tc.method + " " + id); got != map[bool]int{true: 1}[tc.retried] {
				t.Errorf("%s %s reached the other backend %d times (retried: want %v)", tc.method, tc.path, got, tc.retried)
			}
		}
		if good.Bad.Load() != 0 {
			t.Errorf("%d replayed bodies reached the other backend cut short", good.Bad.Load())
		}
	})
}

// TestR04RetryStormIsBounded: every backend resets every request before
// answering, retries allow 5 attempts on resets; 2,000 GETs at concurrency
// 50 cost the backends at most about requests × (1 + 20 %) (Envoy's budget:
// retries in flight ≤ max(3, 20 % of active requests)), not requests × 5;
// the refused retries are counted in impulse_retries_budget_exhausted and
// return at once. The load is HTTP/3, as case R04 has it; the budget does
// not depend on the ingress.
func TestR04RetryStormIsBounded(t *testing.T) {
	bad := new(testbackend.Counter)
	uc := staticUpstream("u", "/", testbackend.NewH1(t, testbackend.Reset(bad)), testbackend.NewH1(t, testbackend.Reset(bad)), testbackend.NewH1(t, testbackend.Reset(bad)))
	uc.Retry = retryOn(5, retry.ConnectFailure, retry.Reset)
	h := newHarness(t, uc)
	const requests, concurrency = 2000, 50
	var wg sync.WaitGroup
	var ok atomic.Int64
	start := time.Now()
	sem := make(chan struct{}, concurrency)
	for i := range requests {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := h.client.Get(h.base + "/storm?" + strconv.Itoa(i))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 502 {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	received := bad.Total.Load()
	retries := counted(h.gw, observe.Retried, "u", "reset")
	exhausted := counted(h.gw, observe.BudgetExhausted, "u", "")
	t.Logf("%d requests in %v: backends received %d, retries %d, budget exhausted %d", requests, elapsed, received, retries, exhausted)
	if ok.Load() != requests {
		t.Errorf("%d of %d requests answered 502", ok.Load(), requests)
	}
	if limit := int64(requests*1.25) + 3*4; received > limit {
		t.Errorf("backends received %d requests, want at most %d (requests × (1 + budget))", received, limit)
	}
	if exhausted == 0 {
		t.Error("impulse_retries_budget_exhausted never counted")
	}
	if int64(retries) != received-requests {
		t.Errorf("retries counted %d, backends received %d extra", retries, received-requests)
	}
}

// pickHeader is the request header a consistent_hash upstream of the tests
// is keyed on, so that a test decides which backend a request goes to.
const pickHeader = "X-Pick"

// keyCandidate is a backend as balance sees it: a key, weight 1 (the
// weight of the tests' static backends), eligible.
type keyCandidate string

func (k keyCandidate) Key() string        { return string(k) }
func (keyCandidate) Weight() int          { return 1 }
func (keyCandidate) InFlight() int64      { return 0 }
func (keyCandidate) Eligible() bool       { return true }
func (keyCandidate) LatencyEWMA() float64 { return 0 }

var _ balance.Candidate = keyCandidate("")

// pickValue returns a value of pickHeader that consistent_hash over
// backends with the given IDs (all eligible, weight 1) maps to want: its
// Maglev table depends only on the keys (the IDs) and weights, so the
// gateway maps the value the same way.
func pickValue(t *testing.T, ids []string, want string) string {
	t.Helper()
	p, err := balance.New(balance.ConsistentHash, balance.Options{HashOn: "header:" + pickHeader})
	if err != nil {
		t.Fatal(err)
	}
	c := make([]balance.Candidate, len(ids))
	for i, id := range ids {
		c[i] = keyCandidate(id)
	}
	picker := p.Picker(c)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	for i := range 1000 {
		v := "k" + strconv.Itoa(i)
		r.Header.Set(pickHeader, v)
		if ids[picker.Pick(r, balance.Skip{})] == want {
			return v
		}
	}
	t.Fatalf("no key of 1000 maps to %s", want)
	return ""
}

// TestPerTryTimeout: per_try_timeout bounds each try's wait for response
// headers. The requests go first to the backend that never answers (a
// consistent_hash key chosen for it): a GET is tried again on the other
// after the 200 ms try (on = ["reset"]) and answered by it well before the
// response_header timeout; a POST is not retried (it may have run) and is
// answered 504 after its one try.
func TestPerTryTimeout(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		for _, scheme := range []string{"http", "https"} {
			t.Run(scheme, func(t *testing.T) {
				stall := testbackend.NewSlow(time.Minute)
				fast := new(testbackend.Counter)
				var s1, s2 *httptest.Server
				if scheme == "https" {
					s1, s2 = testbackend.NewH2(t, stall), testbackend.NewH2(t, testbackend.OK(fast))
				} else {
					s1, s2 = testbackend.NewH1(t, stall), testbackend.NewH1(t, testbackend.OK(fast))
				}
				uc := staticUpstream("u", "/", s1, s2) // IDs "0" (stall) and "1"
				uc.LoadBalancing, uc.HashOn = balance.ConsistentHash, "header:"+pickHeader
				uc.ResponseHeaderTimeout = 10 * time.Second
				uc.Retry = retryOn(2, retry.ConnectFailure, retry.Reset)
				uc.Retry.PerTryTimeout = 200 * time.Millisecond
				h := newHarnessOver(t, ingress, uc)
				key := pickValue(t, []string{"0", "1"}, "0")
				send := func(method, id string, bodyLen int) (int, string, time.Duration) {
					var rd io.Reader
					if bodyLen > 0 {
						rd = bytes.NewReader(bytes.Repeat([]byte("b"), bodyLen))
					}
					req, _ := http.NewRequest(method, h.base+"/pt", rd)
					req.Header.Set("X-Request-Id", id)
					req.Header.Set(pickHeader, key)
					start := time.Now()
					resp, err := h.client.Do(req)
					if err != nil {
						t.Fatalf("%s: %v", method, err)
					}
					defer resp.Body.Close()
					b, _ := io.ReadAll(resp.Body)
					return resp.StatusCode, string(b), time.Since(start)
				}

				code, body, d := send("GET", "1", 0)
				if stall.Total.Load() != 1 || fast.Of("GET 1") != 1 {
					t.Fatalf("GET: the stalled backend got %d requests, the other %d; want 1 each (first try, retry)", stall.Total.Load(), fast.Of("GET 1"))
				}
				if code != 200 || body != "ok" || d > 2*time.Second || d < 200*time.Millisecond {
					t.Fatalf("GET: %d %q after %v, want the other backend's 200 after the 200ms try", code, body, d)
				}
				code, _, d = send("POST", "2", 8)
				if stall.Total.Load() != 2 || fast.Total.Load() != 1 {
					t.Fatalf("POST: the stalled backend got %d requests in all, the other %d; want 2 and 1 (the GET's retry)", stall.Total.Load(), fast.Total.Load())
				}
				if code != 504 || d < 200*time.Millisecond || d > 2*time.Second {
					t.Fatalf("POST: %d after %v, want 504 after about 200ms", code, d)
				}
			})
		}
	})
}

// TestRetriedTryStillCountsAgainstItsBackend: every try reports its own
// outcome to passive health, once: a GET that failed on a closed port and
// succeeded on its retry ejects the closed backend (consecutive_failures =
// 1) and counts a success for the other.
func TestRetriedTryStillCountsAgainstItsBackend(t *testing.T) {
	good := new(testbackend.Counter)
	uc := staticUpstream("u", "/", testbackend.NewH1(t, testbackend.OK(good)))
	uc.Static = append(uc.Static, closedPort(t, "closed", "http"))
	uc.Passive = &health.PassiveConfig{ConsecutiveFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
	h := newHarness(t, uc)
	for i := 0; counted(h.gw, observe.Retried, "u", "connect-failure") == 0; i++ {
		if i == 20 {
			t.Fatal("no request went to the closed backend first")
		}
		if code, _ := sendOne(t, h, "GET", "/", strconv.Itoa(i), 0); code != 200 {
			t.Fatalf("GET: %d", code)
		}
	}
	for _, bi := range h.gw.Backends() {
		switch {
		case bi.ID == "closed" && (!bi.Ejected || bi.Requests != 1):
			t.Errorf("the closed backend after its failed try: %+v, want ejected after 1 request", bi)
		case bi.ID != "closed" && (bi.Ejected || bi.Requests != uint64(good.Total.Load())):
			t.Errorf("the good backend: %+v, want %d requests, not ejected", bi, good.Total.Load())
		}
	}
}

// TestHedgeFailedAnswerWaitsForARunningTry: a hedge copy's 503 that the
// retry policy covers (on = ["503"]) is a failure, not the first answer:
// with the retries spent, the gateway waits for the slow first try's 200
// instead of relaying the 503 and canceling it.
func TestHedgeFailedAnswerWaitsForARunningTry(t *testing.T) {
	slow := testbackend.NewSlow(300 * time.Millisecond)
	busy := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	uc := staticUpstream("u", "/", testbackend.NewH1(t, slow), busy)
	uc.Hedge = retry.Hedge{Delay: 50 * time.Millisecond, Max: 1}
	uc.Retry = retry.Default()
	uc.Retry.On |= retry.Status503
	h := newHarnessOver(t, ProtocolH3, uc)
	for i := range 6 {
		if code, body := sendOne(t, h, "GET", "/hedge", strconv.Itoa(i), 0); code != 200 || body != "slow" {
			t.Fatalf("GET %d: %d %q, want the slow backend's 200", i, code, body)
		}
	}
}

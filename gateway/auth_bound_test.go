package gateway

import (
	"net/http"
	"sync"
	"testing"

	"github.com/impulse-agent/impulse-agent/gateway/accesslog"
	"github.com/impulse-agent/impulse-agent/gateway/auth"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// a07Flood sends n requests to path with hdr at once from c and counts
// their statuses and Retry-After values (errors count as status 0).
func a07Flood(c *http.Client, url string, hdr http.Header, n int) (statuses map[int]int, retryAfter map[string]int) {
	var mu sync.Mutex
	statuses, retryAfter = map[int]int{}, map[string]int{}
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", url, nil)
			for k, v := range hdr {
				req.Header[k] = v
			}
			status, ra := 0, ""
			if resp, err := c.Do(req); err == nil {
				resp.Body.Close()
				status, ra = resp.StatusCode, resp.Header.Get("Retry-After")
			}
			mu.Lock()
			statuses[status]++
			if ra != "" {
				retryAfter[ra]++
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return statuses, retryAfter
}

// TestA07BcryptBound: wrong Basic passwords cannot take the gateway's
// cores. With the bound at one comparison and that slot held (a test
// hook, not timing), a flood of wrong passwords is answered 429
// auth_busy with Retry-After: 1 without a comparison, an unauthenticated
// route beside it and an already verified (cached) credential are
// served, and the held comparison ends as its 401. A free-running flood
// then never has more than the bound comparing at once (BcryptStats),
// each request answered 401 or 429. Over h1, h2 and h3.
func TestA07BcryptBound(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		defer auth.SetBcryptSlots(1)()
		backend := &headerLog{}
		uc := a07Upstream(t, backend)
		open := staticUpstream("open", "/open/", testbackend.NewH1(t, http.HandlerFunc(backend.handler)))
		m, msink := inmemMetrics()
		h, logs := loggedHarness(t, proto, accesslog.Config{}, m, uc, open)
		right, wrong := basicOf(a07User, a07Password), basicOf(a07User, a07Password+"x")

		if status, _, err := h.do("GET", "/basic/warm", nil, 0, right); err != nil || status != 200 {
			t.Fatalf("warming the cache: %d %v", status, err)
		}
		entered, release := make(chan struct{}), make(chan struct{})
		var once, released sync.Once
		free := func() { released.Do(func() { close(release) }) }
		defer free() // a failed test must not leave a request held
		restore := auth.BeforeCompareHook(func() { once.Do(func() { close(entered); <-release }) })
		defer restore()
		held := make(chan int)
		go func() {
			st, _ := a07Flood(h.client, h.base+"/basic/held", wrong, 1)
			for s := range st {
				held <- s
			}
		}()
		select {
		case <-entered:
		case s := <-held:
			t.Fatalf("the first wrong password ended (%d) without comparing", s)
		}

		const flood = 16
		var wg sync.WaitGroup
		var openStatuses, cachedStatuses map[int]int
		wg.Go(func() { openStatuses, _ = a07Flood(h.client, h.base+"/open/x", nil, flood) })
		wg.Go(func() { cachedStatuses, _ = a07Flood(h.client, h.base+"/basic/cached", right, flood) })
		busy, retry := a07Flood(h.client, h.base+"/basic/guess", wrong, flood)
		unknown, retry2 := a07Flood(h.client, h.base+"/basic/guess", basicOf("mallory", "x"), flood)
		retry["1"] += retry2["1"]
		wg.Wait()
		if busy[429] != flood || unknown[429] != flood || retry["1"] != 2*flood {
			t.Errorf("flood with the slot held: %v and %v (Retry-After %v), want %d × 429 auth_busy with Retry-After: 1 each", busy, unknown, retry, flood)
		}
		if openStatuses[200] != flood || cachedStatuses[200] != flood {
			t.Errorf("beside the flood: open route %v, cached credential %v, want %d × 200 each", openStatuses, cachedStatuses, flood)
		}
		free()
		if s := <-held; s != 401 {
			t.Errorf("the held comparison: %d, want 401", s)
		}
		restore()

		// Free-running: the bound holds whatever the timing.
		unheld, _ := a07Flood(h.client, h.base+"/basic/free", wrong, 32)
		if unheld[401]+unheld[429] != 32 || unheld[401] == 0 {
			t.Errorf("free-running flood: %v, want 32 answers, 401 or 429, at least one 401", unheld)
		}
		if _, most := auth.BcryptStats(); most != 1 {
			t.Errorf("at most %d bcrypt comparisons ran at once, want the bound: 1", most)
		}
		if n := counterSum(h.gw, msink, "impulse.auth", map[string]string{"method": "basic", "result": "busy"}); n < 2*flood {
			t.Errorf("impulse_auth{method=basic,result=busy} = %v, want at least %d", n, 2*flood)
		}
		var sawBusy bool
		for _, l := range logs.wait(t, 1+1+4*flood+32) {
			if l["auth"] == "basic:busy" {
				sawBusy = true
				checkFields(t, l, map[string]any{"status": float64(429), "reason": "auth_busy"})
			}
		}
		if !sawBusy {
			t.Error("no access log line says auth basic:busy")
		}
	})
}

// basicOf is the Authorization field of user and password (RFC 7617).
func basicOf(user, pw string) http.Header {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pw)
	return http.Header{"Authorization": r.Header["Authorization"]}
}

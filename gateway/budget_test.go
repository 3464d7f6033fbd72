package gateway

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gobwas/ws"

	"github.com/impulse-agent/impulse-agent/gateway/observe"
	"github.com/impulse-agent/impulse-agent/gateway/retry"
	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestRetryBudgetReturnsToZero: many failing requests through every
// attempt loop (plain retries of refused connections and of 503s, hedged
// requests with retries, WebSocket handshakes retried on refused
// connections, requests the client cancels during a try and during a
// retry's back-off, requests past their request timeout) leave every
// upstream's retry budget holding nothing once they are over: the retry
// state gives back every slot it took, whatever path ended the request.
func TestRetryBudgetReturnsToZero(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, proto string) {
		generous := func(on ...retry.Condition) retry.Policy {
			p := retryOn(3, on...)
			p.Backoff, p.MaxBackoff = time.Millisecond, 2*time.Millisecond
			p.Budget = retry.Budget{Percent: 100, MinConcurrency: 1000}
			return p
		}
		dead := func(id string) upstream.Spec { return closedPort(t, id, "http") }
		answer503 := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }))
		slow := testbackend.NewSlow(20 * time.Millisecond)
		stall := testbackend.NewSlow(time.Minute)
		ok := testbackend.NewH1(t, named("ok"))

		plain := staticUpstream("plain", "/plain", ok)
		plain.Static = append(plain.Static, dead("p1"), dead("p2"))
		plain.Retry = generous(retry.ConnectFailure)
		s503 := staticUpstream("s503", "/s503", answer503, answer503, ok)
		s503.Retry = generous(retry.Status503)
		hedged := staticUpstream("hedged", "/hedged", testbackend.NewH1(t, slow), testbackend.NewH1(t, slow))
		hedged.Static = append(hedged.Static, dead("h1"))
		hedged.Retry = generous(retry.ConnectFailure)
		hedged.Hedge = retry.Hedge{Delay: 2 * time.Millisecond, Max: 2}
		echo := testbackend.NewWSEcho(t)
		tunnels := wsUpstream(echo, nil)
		tunnels.Static = append(tunnels.Static, dead("w1"), dead("w2"))
		tunnels.Retry = generous(retry.ConnectFailure)
		canceled := staticUpstream("canceled", "/canceled", testbackend.NewH1(t, stall))
		canceled.Static = append(canceled.Static, dead("c1"))
		canceled.Retry = generous(retry.ConnectFailure, retry.Reset)
		canceled.Retry.Backoff, canceled.Retry.MaxBackoff = time.Second, time.Second // cancels land in back-offs too
		timedOut := staticUpstream("timedout", "/timedout", testbackend.NewH1(t, stall), testbackend.NewH1(t, stall))
		timedOut.Retry = generous(retry.Reset)
		timedOut.Retry.PerTryTimeout = 20 * time.Millisecond
		timedOut.RequestTimeout = 50 * time.Millisecond
		h := newHarnessOver(t, proto, plain, s503, hedged, tunnels, canceled, timedOut)

		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				for _, path := range []string{"/plain", "/s503", "/hedged", "/timedout"} {
					resp, err := h.client.Get(h.base + path + "?" + strconv.Itoa(i))
					if err != nil {
						t.Errorf("GET %s: %v", path, err)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(5+i*3)*time.Millisecond)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, "GET", h.base+"/canceled", nil)
				if resp, err := h.client.Do(req); err == nil {
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		for range 4 {
			c, err := dialWS(t, h, "/ws", nil)
			if err != nil {
				t.Fatalf("WebSocket: %v", err)
			}
			c.send(ws.OpClose, ws.NewCloseFrameBody(ws.StatusNormalClosure, ""))
			c.readClose()
			c.close()
		}
		tbl := h.gw.table.Load()
		held := func() map[string]int64 {
			m := map[string]int64{}
			for name, u := range tbl.upstreams {
				if n := attemptsOf(tbl, u).InFlight(); n != 0 {
					m[name] = n
				}
			}
			return m
		}
		eventually(t, 10*time.Second, func() bool { return len(held()) == 0 }, "every retry budget back at zero")
		for _, name := range []string{"plain", "s503", "hedged", "ws"} {
			if retriesOf(h.gw, name) == 0 {
				t.Errorf("upstream %s retried nothing: the run did not exercise its loop", name)
			}
		}
	})
}

// retriesOf is the retries of upstream over every reason.
func retriesOf(g *Gateway, up string) uint64 {
	var n uint64
	for _, c := range retry.ConditionNames() {
		n += g.obs.Metrics.Attempts(observe.Retried, up, c)
	}
	return n
}

package gateway

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/gateway/upstream"
	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestGracefulShutdownFinishesSlowResponse: Shutdown lets an in-flight slow
// response complete, then refuses new connections.
func TestGracefulShutdownFinishesSlowResponse(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		started := make(chan struct{})
		be := testbackend.NewH1(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "first;")
			w.(http.Flusher).Flush()
			close(started)
			time.Sleep(500 * time.Millisecond)
			io.WriteString(w, "second")
		}))
		h := newHarnessOver(t, ingress, staticUpstream("u", "/", be))
		done := h.getAsync("/")
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.gw.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown: %v", err)
		}
		r := <-done
		if r.err != nil || r.body != "first;second" {
			t.Fatalf("slow response: %q, %v", r.body, r.err)
		}
	})
}

func TestConcurrentMembershipChangesNoFailures(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		servers := []*httptest.Server{testbackend.NewH1(t, named("a")), testbackend.NewH1(t, named("b")), testbackend.NewH1(t, named("c"))}
		uc := UpstreamConfig{Config: upstream.Config{Name: "web", Discovered: true}, Routes: []RouteConfig{{PathPrefix: "/"}}}
		h := newHarnessOver(t, ingress, uc)
		set := func(idx ...int) {
			var specs []upstream.Spec
			for _, i := range idx {
				specs = append(specs, specFor(servers[i].URL, servers[i]))
			}
			if err := h.gw.SetDiscovered("web", specs); err != nil {
				t.Error(err)
			}
		}
		set(0, 1)
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var failures, total atomic.Int64
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					resp, err := h.client.Get(h.base + "/")
					total.Add(1)
					if err != nil {
						failures.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						failures.Add(1)
					}
				}
			}()
		}
		sets := [][]int{{0, 1, 2}, {1, 2}, {2}, {0, 2}, {0, 1}}
		for i := 0; i < 20; i++ {
			set(sets[i%len(sets)]...)
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		wg.Wait()
		if failures.Load() != 0 {
			t.Fatalf("%d of %d requests failed during membership changes", failures.Load(), total.Load())
		}
	})
}

func newRand(seed uint64) io.Reader { return &randReader{r: rand.New(rand.NewPCG(seed, seed))} }

type randReader struct{ r *rand.Rand }

func (r *randReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r.r.Uint32())
	}
	return len(p), nil
}

package gateway

import (
	"bufio"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestB20StreamingResponsesAreNotHeldBack: a backend flushes 200 with
// content-type text/event-stream at once, stays silent for 1.5 s (longer
// than the upstream's response_header timeout, 500 ms), then writes an event
// every 300 ms. The client has the headers before the backend writes
// anything more (the backend waits for that, so holding the headers back
// until the first body byte deadlocks the test), and each event before the
// backend writes the next; the silence is not cut by the shorter timeout.
func TestB20StreamingResponsesAreNotHeldBack(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, ingress string) {
		const events = 5
		forProtocols(t, backendProtocols, func(t *testing.T, proto string) {
			gotHeaders := make(chan struct{})
			gotEvent := make(chan int)
			wrote := make(chan time.Time, events)
			hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				flushed := time.Now()
				select {
				case <-gotHeaders:
				case <-r.Context().Done():
					return
				}
				time.Sleep(time.Until(flushed.Add(1500 * time.Millisecond)))
				for i := range events {
					if i > 0 {
						time.Sleep(300 * time.Millisecond)
					}
					fmt.Fprintf(w, "data: %d\n\n", i)
					w.(http.Flusher).Flush()
					wrote <- time.Now()
					select {
					case <-gotEvent:
					case <-r.Context().Done():
						return
					}
				}
			})
			be := backendOver(t, proto, hf)
			uc := staticUpstream("u", "/", be)
			uc.ResponseHeaderTimeout = 500 * time.Millisecond
			h := newHarnessOver(t, ingress, uc)
			respc := make(chan *http.Response, 1)
			errc := make(chan error, 1)
			go func() {
				resp, err := h.client.Get(h.base + "/events")
				if err != nil {
					errc <- err
					return
				}
				respc <- resp
			}()
			var resp *http.Response
			select {
			case resp = <-respc:
			case err := <-errc:
				t.Fatal(err)
			case <-time.After(10 * time.Second):
				t.Fatal("no response headers while the backend waits for the client to have them")
			}
			defer resp.Body.Close()
			close(gotHeaders)
			if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "text/event-stream" {
				t.Fatalf("got %d %q", resp.StatusCode, ct)
			}
			lines := bufio.NewReader(resp.Body)
			minLag := time.Hour
			for i := range events {
				line, err := lines.ReadString('\n')
				if err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
				arrived := time.Now()
				if want := fmt.Sprintf("data: %d\n", i); line != want {
					t.Fatalf("event %d: got %q, want %q", i, line, want)
				}
				if blank, _ := lines.ReadString('\n'); strings.TrimSpace(blank) != "" {
					t.Fatalf("event %d not terminated: %q", i, blank)
				}
				lag := arrived.Sub(<-wrote)
				minLag = min(minLag, lag)
				if lag > time.Second {
					t.Errorf("event %d arrived %v after the backend wrote it", i, lag)
				}
				gotEvent <- i
			}
			// Each event arrived before the next was written (the backend
			// waits for it); on a loaded machine single events can be late,
			// but not every one of them.
			if minLag > 100*time.Millisecond {
				t.Errorf("every event arrived more than 100 ms after it was written (best %v)", minLag)
			}
		})
	})
}

package gateway

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestRapidResetIsHarmless (CVE-2023-44487): one HTTP/2 connection opens
// and resets streams as fast as it can for two seconds while a normal
// client keeps making requests on another. Every normal request
// succeeds, and the streams the attacker resets do not pile up at the
// backend: the gateway passes each reset on (its backend request is
// canceled), and Go's server runs at most max_concurrent_streams handlers
// per connection, closing the connection with ENHANCE_YOUR_CALM when
// reset streams queue up beyond that. Counts only, no timing.
func TestRapidResetIsHarmless(t *testing.T) {
	const maxStreams = 50
	var inflight, peak, slowHits atomic.Int64
	be := testbackend.NewH2(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			io.WriteString(w, "fast")
			return
		}
		slowHits.Add(1)
		n := inflight.Add(1)
		defer inflight.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		select { // held until the gateway cancels it
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	h := startHarness(t, ListenerConfig{Limits: Limits{MaxConcurrentStreams: maxStreams}}, ProtocolH2, staticUpstream("u", "/", be))

	attacker := dialH2(t, h)
	if got := attacker.settings[http2.SettingMaxConcurrentStreams]; got != maxStreams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want %d", got, maxStreams)
	}
	cutOff := make(chan h2result, 1)
	go func() { // drain what the server sends until it ends the connection
		_ = attacker.c.SetReadDeadline(time.Time{})
		for {
			f, err := attacker.fr.ReadFrame()
			if err != nil {
				cutOff <- h2result{closed: true}
				return
			}
			if ga, ok := f.(*http2.GoAwayFrame); ok {
				cutOff <- h2result{goAway: true, code: ga.ErrCode}
				return
			}
		}
	}()

	done := make(chan struct{})
	var ok, failed atomic.Int64
	go func() {
		defer close(done)
		client := &http.Client{Transport: clientTransport(ProtocolH2, h.client.Transport.(*http.Transport).TLSClientConfig)}
		defer client.CloseIdleConnections()
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
			resp, err := client.Get(h.base + "/fast")
			if err != nil {
				failed.Add(1)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && string(b) == "fast" {
				ok.Add(1)
			} else {
				failed.Add(1)
			}
		}
	}()

	var streams int
	for id := uint32(1); ; id += 2 {
		select {
		case <-done:
		default:
			if attacker.writeRequest(id, "GET", "/slow", true) == nil && attacker.fr.WriteRSTStream(id, http2.ErrCodeCancel) == nil {
				streams++
				continue
			}
		}
		break
	}
	<-done
	var end h2result
	select {
	case end = <-cutOff:
	default:
	}
	t.Logf("attacker: %d streams opened and reset; connection end %+v; backend: %d slow requests, peak %d in flight; normal client: %d ok",
		streams, end, slowHits.Load(), peak.Load(), ok.Load())
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Errorf("normal client: %d ok, %d failed during the attack", ok.Load(), failed.Load())
	}
	if p := peak.Load(); p > maxStreams {
		t.Errorf("%d reset streams were in flight at the backend at once, more than max_concurrent_streams (%d)", p, maxStreams)
	}
	eventually(t, 10*time.Second, func() bool { return inflight.Load() == 0 }, "the backend's requests for reset streams to end")
}

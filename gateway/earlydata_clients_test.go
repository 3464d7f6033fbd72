package gateway

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// earlyBackend records "METHOD PATH EARLY-DATA" per request; /backend-425
// answers 425 itself.
type earlyBackend struct {
	mu   sync.Mutex
	seen []string
}

func (b *earlyBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	b.mu.Lock()
	b.seen = append(b.seen, r.Method+" "+r.URL.Path+" "+strings.Join(r.Header.Values("Early-Data"), ","))
	b.mu.Unlock()
	if r.URL.Path == "/backend-425" {
		w.Header().Set("X-From", "backend")
		w.WriteHeader(http.StatusTooEarly)
		_, _ = io.WriteString(w, "backend says too early")
		return
	}
	_, _ = io.WriteString(w, "ok")
}

func (b *earlyBackend) requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.seen)
}

func (b *earlyBackend) saw(reqs ...string) bool {
	got := b.requests()
	for _, r := range reqs {
		if !slices.Contains(got, r) {
			return false
		}
	}
	return true
}

// ticketCache is a client session cache that reports, for every session
// ticket stored, whether it allows early data (max_early_data_size).
type ticketCache struct {
	tls.ClientSessionCache
	tickets chan bool
}

func newTicketCache() *ticketCache {
	return &ticketCache{ClientSessionCache: tls.NewLRUClientSessionCache(4), tickets: make(chan bool, 16)}
}

func (c *ticketCache) Put(key string, cs *tls.ClientSessionState) {
	c.ClientSessionCache.Put(key, cs)
	if cs == nil {
		return
	}
	if _, ss, err := cs.ResumptionState(); err == nil && ss != nil {
		select {
		case c.tickets <- ss.EarlyData:
		default:
		}
	}
}

// primeTicket makes one HTTP/3 request to h with tc so that tc's session
// cache holds a ticket, and returns whether that ticket offers early data.
func primeTicket(t *testing.T, h *harness, tc *tls.Config, cache *ticketCache) bool {
	t.Helper()
	tr := &http3.Transport{TLSClientConfig: tc}
	defer tr.Close()
	resp, err := (&http.Client{Transport: tr}).Get(h.base + "/prime")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	select {
	case early := <-cache.tickets:
		return early
	case <-time.After(10 * time.Second):
		t.Fatal("no session ticket within 10s")
		return false
	}
}

// udpRelay forwards datagrams between one client and the gateway's UDP
// socket. While it holds, it keeps what the gateway sends: the client never
// sees the server's handshake flight, so everything it sends meanwhile goes
// in 0-RTT packets and the gateway's handshake cannot complete — the
// gateway is shown requests that are certainly early data.
type udpRelay struct {
	front net.PacketConn // the client's side
	back  *net.UDPConn   // connected to the gateway

	mu      sync.Mutex
	client  net.Addr
	holding bool
	held    [][]byte
}

func newUDPRelay(t *testing.T, target string, hold bool) *udpRelay {
	t.Helper()
	front, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.DialUDP("udp", nil, ta)
	if err != nil {
		t.Fatal(err)
	}
	r := &udpRelay{front: front, back: back, holding: hold}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, addr, err := front.ReadFrom(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			r.client = addr
			r.mu.Unlock()
			_, _ = back.Write(buf[:n])
		}
	})
	wg.Go(func() {
		buf := make([]byte, 65536)
		for {
			n, err := back.Read(buf)
			if err != nil {
				return
			}
			r.mu.Lock()
			if r.holding {
				r.held = append(r.held, slices.Clone(buf[:n]))
			} else if r.client != nil {
				_, _ = front.WriteTo(buf[:n], r.client)
			}
			r.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		front.Close()
		back.Close()
		wg.Wait()
	})
	return r
}

func (r *udpRelay) addr() string { return r.front.LocalAddr().String() }

// release delivers what was held, in order, and stops holding.
func (r *udpRelay) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.holding = false
	for _, d := range r.held {
		_, _ = r.front.WriteTo(d, r.client)
	}
	r.held = nil
}

type roundTripResult struct {
	resp *http.Response
	body string
	err  error
}

// goRoundTrip runs req on tr in the background.
func goRoundTrip(tr http.RoundTripper, req *http.Request) <-chan roundTripResult {
	ch := make(chan roundTripResult, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		res := roundTripResult{resp: resp, err: err}
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			res.body = string(b)
		}
		ch <- res
	}()
	return ch
}

func await[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// sendRaw sends a whole request (raw frames) on a new stream of conn and
// reads the answer in the background: quic-go's client sends only GET and
// HEAD in 0-RTT, so an unsafe early request is written by hand.
func sendRaw(t *testing.T, conn *quic.Conn, raw []byte) <-chan []h3Frame {
	t.Helper()
	str, err := conn.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := str.Write(raw); err != nil {
		t.Fatal(err)
	}
	str.Close()
	ch := make(chan []h3Frame, 1)
	go func() {
		str.SetReadDeadline(time.Now().Add(10 * time.Second))
		frames, _ := readH3Frames(str)
		ch <- frames
	}()
	return ch
}

// quicConnsOpen is the harness listener's open QUIC connections.
func quicConnsOpen(h *harness) int64 {
	return h.gw.obs.Metrics.Conns(false, "test")
}

// firstStatus is the first :status gtlsclient printed ("" if none).
func firstStatus(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if m := reHeader.FindStringSubmatch(line); m != nil && m[1] == ":status" {
			return m[2]
		}
	}
	return ""
}

func rawPost(path, body string) []byte {
	return append(headersFrame(reqFields("POST", path, qpack.HeaderField{Name: "content-length", Value: "4"})...), dataFrame(body)...)
}

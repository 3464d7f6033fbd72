package soak

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testpki"
	"github.com/impulse-agent/impulse-agent/test/testproc"
)

const overloadConfig = `
drain_timeout = "5s"
control {
  address      = "127.0.0.1:0"
  enable_debug = true
}
listener "public" {
  address = "127.0.0.1:0"
  tls {
    cert_file = %[1]q
    key_file  = %[2]q
  }
  limits {
    max_connections     = 4000
    read_header_timeout = "5s"
    client_body_timeout = "5s"
  }
  rate_limit {
    requests_per_second = 100
    burst               = 50
    key                 = "header:X-Client"
  }
}
upstream "api" {
  route {
    path_prefix = "/"
  }
  limits {
    max_requests  = 20
    max_queue     = 20
    queue_timeout = "20ms"
  }
  backend "a" {
    address = "http://127.0.0.1:%[3]d"
  }
  backend "b" {
    address = "http://127.0.0.1:%[4]d"
  }
}
`

// tally counts the answers of one phase and keeps the admitted latencies.
type tally struct {
	mu        sync.Mutex
	ok        []time.Duration
	shed503   int
	shed429   int
	other     map[string]int
	maxRSS    int64
	startedAt time.Time
}

func newTally() *tally { return &tally{other: map[string]int{}, startedAt: time.Now()} }

func (t *tally) add(status int, reason string, err error, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil:
		t.other["error: "+strings.SplitN(err.Error(), ":", 2)[0]]++
	case status == 200:
		t.ok = append(t.ok, d)
	case status == 503 && reason == "overloaded":
		t.shed503++
	case status == 429:
		t.shed429++
	default:
		t.other[fmt.Sprintf("%d %s", status, reason)]++
	}
}

func (t *tally) quantile(q float64) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.ok) == 0 {
		return 0
	}
	s := slices.Clone(t.ok)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (t *tally) String() string {
	el := time.Since(t.startedAt).Seconds()
	t.mu.Lock()
	n := len(t.ok)
	others := fmt.Sprint(t.other)
	t.mu.Unlock()
	return fmt.Sprintf("%d served (%.0f/s), %d shed 503, %d shed 429, other %s; served p50 %v p99 %v; max RSS %.1f MiB",
		n, float64(n)/el, t.shed503, t.shed429, others, t.quantile(0.5).Round(time.Millisecond), t.quantile(0.99).Round(time.Millisecond), float64(t.maxRSS)/(1<<20))
}

// paced runs workers loops until ctx ends, each sending one request per
// pace (never more than one in flight: bounded request loops).
func paced(ctx context.Context, workers int, pace time.Duration, send func(i int) (int, string, error), tl *tally) *sync.WaitGroup {
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(pace)
			defer tick.Stop()
			for {
				start := time.Now()
				status, reason, err := send(i)
				if ctx.Err() != nil {
					return
				}
				tl.add(status, reason, err, time.Since(start))
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return &wg
}

// TestOverload is issue 14's "overload held": five times the load the
// gateway's limits admit, for OVERLOAD_PHASE (default 60 s), then a
// recovery check, then the same legitimate load beside a slowloris
// population and beside a QUIC Initial flood. It reports the figures and
// fails on answers other than 200, 503 overloaded and 429, on legitimate
// requests refused while only attackers misbehave, and on a served p99
// above 1 s. OVERLOAD=1 runs it (make overload).
func TestOverload(t *testing.T) {
	if os.Getenv("OVERLOAD") == "" {
		t.Skip("minutes of load: make overload")
	}
	phase := 60 * time.Second
	if s := os.Getenv("OVERLOAD_PHASE"); s != "" {
		var err error
		if phase, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	ca := testpki.NewCA(t, "overload CA")
	certPEM, keyPEM := testpki.PEM(t, ca.Issue(t, testpki.Leaf{CN: "localhost", DNS: []string{"localhost"}, IPs: loopbackIPs}))
	certFile, keyFile, cfg := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "gw.hcl")
	os.WriteFile(certFile, certPEM, 0o600)
	os.WriteFile(keyFile, keyPEM, 0o600)
	a := testproc.Start(t, backendEnv+"=a busy")
	b := testproc.Start(t, backendEnv+"=b busy")
	os.WriteFile(cfg, []byte(fmt.Sprintf(overloadConfig, certFile, keyFile, a.Port, b.Port)), 0o600)
	gw := startGateway(t, cfg)
	tc := &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}
	cl := newClients(gw.addr, tc)
	defer cl.close()
	protos := []string{"h1", "h2", "h3"}
	send := func(proto, client string) (int, string, error) {
		req, _ := http.NewRequest("GET", cl.base+"/small", nil)
		req.Header.Set("X-Client", client)
		resp, err := cl.of(proto).Do(req)
		if err != nil {
			return 0, "", err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Impulse-Error"), nil
	}
	rss := func(tl *tally, ctx context.Context) {
		for ctx.Err() == nil {
			if r := (&world{gw: gw}).resources(t).rss; r > tl.maxRSS {
				tl.mu.Lock()
				tl.maxRSS = r
				tl.mu.Unlock()
			}
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
		}
	}
	run := func(name string, d time.Duration, workers int, pace time.Duration, extra func(ctx context.Context)) *tally {
		tl := newTally()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		go rss(tl, ctx)
		if extra != nil {
			go extra(ctx)
		}
		paced(ctx, workers, pace, func(i int) (int, string, error) {
			return send(protos[i%3], fmt.Sprintf("w%d", i))
		}, tl).Wait()
		t.Logf("%-28s %s", name, tl)
		return tl
	}

	// Capacity: what the limits admit (2 backends × 50 ms, max_requests 20).
	capacity := run("capacity (20 closed loops)", 10*time.Second, 20, time.Millisecond, nil)
	admitted := float64(len(capacity.ok)) / 10
	// Five times that, from 200 paced loops, plus one abusive client
	// sharing a key beyond its rate limit.
	offered := 5 * admitted
	pace := time.Duration(float64(200) / offered * float64(time.Second))
	abuser := newTally()
	over := run(fmt.Sprintf("overload (%.0f/s offered)", offered), phase, 200, pace, func(ctx context.Context) {
		paced(ctx, 10, 10*time.Millisecond, func(i int) (int, string, error) { return send("h2", "abuser") }, abuser).Wait()
	})
	t.Logf("%-28s %s", "  one client at 1000/s", abuser)
	// Recovery: the first requests after the load are served at once.
	rec := newTally()
	for range 100 {
		start := time.Now()
		status, reason, err := send("h2", "after")
		rec.add(status, reason, err, time.Since(start))
	}
	t.Logf("%-28s %s", "recovery (100 sequential)", rec)
	legit := func(name string, attack func(ctx context.Context)) *tally {
		return run(name, phase, 10, 100*time.Millisecond, attack)
	}
	slow := legit("slowloris + legitimate", func(ctx context.Context) { slowloris(ctx, gw.addr, tc) })
	flood := legit("Initial flood + legitimate", func(ctx context.Context) { initialFlood(ctx, gw.addr) })

	for name, tl := range map[string]*tally{"overload": over, "abuser": abuser, "recovery": rec, "slowloris": slow, "flood": flood} {
		if len(tl.other) > 0 {
			t.Errorf("%s: answers other than 200/503/429: %v", name, tl.other)
		}
		if p := tl.quantile(0.99); p > time.Second {
			t.Errorf("%s: served p99 %v > 1s", name, p)
		}
	}
	if over.shed503 == 0 || abuser.shed429 == 0 {
		t.Errorf("overload: shed %d with 503, the abusive client %d with 429", over.shed503, abuser.shed429)
	}
	for name, tl := range map[string]*tally{"recovery": rec, "slowloris": slow, "flood": flood} {
		if tl.shed503+tl.shed429 > 0 {
			t.Errorf("%s: %d legitimate requests shed", name, tl.shed503+tl.shed429)
		}
	}
}

// slowloris holds 1,500 TLS connections that trickle a header section one
// byte per second and never finish it, reconnecting when the gateway
// closes them (read_header_timeout), and 10 uploads that trickle a body
// one byte per second.
func slowloris(ctx context.Context, addr string, tc *tls.Config) {
	var wg sync.WaitGroup
	var opened atomic.Int64
	trickle := func(head string, n int) {
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(i) * time.Millisecond) // spread the handshakes
				for ctx.Err() == nil {
					c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: tc.RootCAs, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
					if err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					opened.Add(1)
					_, err = io.WriteString(c, head)
					for err == nil && ctx.Err() == nil {
						select {
						case <-time.After(time.Second):
						case <-ctx.Done():
						}
						_, err = io.WriteString(c, "x")
					}
					c.Close()
				}
			}()
		}
	}
	trickle("GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ", 1500)
	trickle("POST / HTTP/1.1\r\nHost: localhost\r\nX-Client: slow-body\r\nContent-Length: 1000000\r\n\r\n", 10)
	wg.Wait()
}

// initialFlood sends QUIC Initials from random connection IDs (as a
// spoofing sender would) at up to about 20,000 packets per second.
func initialFlood(ctx context.Context, addr string) {
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return
	}
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return
	}
	defer c.Close()
	go func() { // drain the Retries
		buf := make([]byte, 2048)
		for {
			if _, _, err := c.ReadFromUDP(buf); err != nil {
				return
			}
		}
	}()
	id := func() []byte { b := make([]byte, 8); _, _ = rand.Read(b); return b }
	for ctx.Err() == nil {
		for range 200 {
			_, _ = c.WriteToUDP(initial(id(), id()), to)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// initial is a QUIC v1 Initial no key decrypts (RFC 9000 §17.2.2),
// padded to 1,200 bytes (§14.1).
func initial(dcid, scid []byte) []byte {
	p := []byte{0xc0, 0, 0, 0, 1, byte(len(dcid))}
	p = append(append(p, dcid...), byte(len(scid)))
	p = append(append(p, scid...), 0)
	rest := 1200 - len(p) - 2
	p = binary.BigEndian.AppendUint16(p, 0x4000|uint16(rest))
	return append(p, make([]byte, rest)...)
}

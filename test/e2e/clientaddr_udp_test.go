package e2e

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// sppForwarder is a one-client UDP balancer speaking Cloudflare's Simple
// Proxy Protocol: the client's datagrams go to the gateway behind a 38-byte
// header naming client, replies come back without it (and must carry it).
func sppForwarder(t *testing.T, gw string, client netip.AddrPort) string {
	t.Helper()
	front, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gwAddr, err := net.ResolveUDPAddr("udp", gw)
	if err != nil {
		t.Fatal(err)
	}
	dst := gwAddr.AddrPort()
	hdr := binary.BigEndian.AppendUint16(nil, 0x56EC)
	c, p := client.Addr().As16(), dst.Addr().As16()
	hdr = append(append(hdr, c[:]...), p[:]...)
	hdr = binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(hdr, client.Port()), dst.Port())

	var mu sync.Mutex
	var from net.Addr // the client, once it sent
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 1<<16)
		for {
			n, a, err := front.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			from = a
			mu.Unlock()
			_, _ = up.WriteTo(append(append([]byte{}, hdr...), buf[:n]...), gwAddr)
		}
	})
	wg.Go(func() {
		buf := make([]byte, 1<<16)
		for {
			n, _, err := up.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			to := from
			mu.Unlock()
			if to != nil && bytes.HasPrefix(buf[:n], hdr) {
				_, _ = front.WriteTo(buf[len(hdr):n], to)
			}
		}
	})
	t.Cleanup(func() {
		front.Close()
		up.Close()
		wg.Wait()
	})
	return front.LocalAddr().String()
}

// TestA02ClientAddressFromHCL is case A02 against the built binary,
// configured in HCL: proxy_protocol { udp = "spp" } on an h3 listener;
// quic-go's client through an SPP forwarder is logged as the client the
// header names, gets its X-Forwarded-For, and the listener's ip_deny judges
// that client.
func TestA02ClientAddressFromHCL(t *testing.T) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	}))
	t.Cleanup(be.Close)
	logPath := filepath.Join(t.TempDir(), "access.log")
	a := startAgent(t, fmt.Sprintf(`
drain_timeout = "10s"
control { address = "127.0.0.1:0" }
listener "public" {
  address   = "127.0.0.1:0"
  protocols = ["h3"]
  tls {
    cert_file = %q
    key_file  = %q
  }
  proxy_protocol {
    trusted = ["127.0.0.0/8"]
    udp     = "spp"
  }
  ip_deny = ["198.51.100.0/24"]
}
access_log { path = %q }
upstream "web" {
  route { path_prefix = "/" }
  backend "a" { address = %q }
}
`, certFile, keyFile, logPath, be.URL))

	for _, tc := range []struct {
		client netip.AddrPort
		status int
		body   string
	}{
		{netip.MustParseAddrPort("203.0.113.7:4000"), 200, "203.0.113.7"},
		{netip.MustParseAddrPort("[2001:db8::7]:6000"), 200, "2001:db8::7"},
		{netip.MustParseAddrPort("198.51.100.9:5000"), 403, ""},
	} {
		fwd := sppForwarder(t, a.ListenAddr, tc.client)
		c, _ := newH3Client(t)
		resp, err := c.Get("https://" + fwd + "/")
		if err != nil {
			t.Fatalf("%v: %v", tc.client, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || tc.status == 200 && string(b) != tc.body {
			t.Errorf("%v: %d %q, want %d %q", tc.client, resp.StatusCode, b, tc.status, tc.body)
		}
	}
	var lines []map[string]any
	waitFor(t, 10*time.Second, "3 access log lines", func() bool {
		lines = lines[:0]
		f, err := os.Open(logPath)
		if err != nil {
			return false
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines = append(lines, m)
			}
		}
		return len(lines) >= 3
	})
	for i, want := range []string{"203.0.113.7:4000", "[2001:db8::7]:6000", "198.51.100.9:5000"} {
		if lines[i]["client_address"] != want || lines[i]["protocol"] != "h3" {
			t.Errorf("line %d: client_address %v over %v, want %s over h3", i, lines[i]["client_address"], lines[i]["protocol"], want)
		}
	}
}

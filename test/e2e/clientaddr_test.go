package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testtool"
)

// TestA01A03A04ClientAddressFromHCL is the client address slice against
// the built binary, configured in HCL: a listener with proxy_protocol
// (required, 127.0.0.0/8 trusted), forwarded_headers (127.0.0.1/32) and
// ip_deny, and a route with ip_allow. curl --haproxy-protocol (v1) over
// h1 and h2 and quic-go's client over h3 reach it; the access log, the
// forwarded X-Forwarded-For and the IP rules all see the same client.
func TestA01A03A04ClientAddressFromHCL(t *testing.T) {
	curl := testtool.Need(t, "curl", "curl")
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	}))
	t.Cleanup(be.Close)
	logPath := filepath.Join(t.TempDir(), "access.log")
	a := startAgent(t, fmt.Sprintf(`
drain_timeout = "10s"
control { address = "127.0.0.1:0" }
listener "public" {
  address = "127.0.0.1:0"
  tls {
    cert_file = %q
    key_file  = %q
  }
  proxy_protocol    { trusted = ["127.0.0.0/8"] }
  forwarded_headers { trusted = ["127.0.0.1/32"] }
  ip_deny = ["127.0.0.2/32"]
}
access_log { path = %q }
upstream "web" {
  route { path_prefix = "/" }
  route {
    path_prefix = "/admin"
    ip_allow    = ["10.0.0.0/8"]
  }
  backend "a" { address = %q }
}
`, certFile, keyFile, logPath, be.URL))

	curlGet := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, curl, append([]string{"-sS", "--cacert", certFile, "-w", " %{http_code}"}, args...)...).CombinedOutput()
		return string(out), err
	}
	for _, flag := range []string{"--http1.1", "--http2"} {
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"the PROXY header's client", []string{"--haproxy-protocol", a.URL("/")}, "127.0.0.1 200"},
			{"a forwarded client allowed by the route", []string{"--haproxy-protocol", "-H", "X-Forwarded-For: 10.1.1.1", a.URL("/admin")}, "10.1.1.1, 127.0.0.1 200"},
			{"the PROXY client outside the route's allow list", []string{"--haproxy-protocol", a.URL("/admin")}, " 403"},
			{"a PROXY client the listener denies", []string{"--haproxy-protocol", "--interface", "127.0.0.2", a.URL("/")}, " 403"},
		} {
			out, err := curlGet(append([]string{flag}, tc.args...)...)
			if err != nil || !strings.HasSuffix(out, tc.want) || tc.want == " 403" && out != " 403" && !strings.HasSuffix(out, "\n 403") {
				t.Errorf("curl %s, %s: %q %v, want %q", flag, tc.name, out, err, tc.want)
			}
		}
		if out, err := curlGet(flag, a.URL("/")); err == nil {
			t.Errorf("curl %s without --haproxy-protocol was served: %q", flag, out)
		}
	}
	c, _ := newH3Client(t)
	for _, tc := range []struct {
		xff, path string
		status    int
		body      string
	}{
		{"10.1.1.1", "/admin", 200, "10.1.1.1, 127.0.0.1"},
		{"", "/admin", 403, ""},
		{"127.0.0.2", "/", 403, ""},
	} {
		req, _ := http.NewRequest("GET", a.URL(tc.path), nil)
		if tc.xff != "" {
			req.Header.Set("X-Forwarded-For", tc.xff)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || tc.status == 200 && string(b) != tc.body || tc.status == 403 && resp.Header.Get("x-impulse-error") != "ip_denied" {
			t.Errorf("h3 %s X-Forwarded-For %q: %d %q %q", tc.path, tc.xff, resp.StatusCode, b, resp.Header.Get("x-impulse-error"))
		}
	}

	// Every served request is one line: 8 over curl, 3 over h3.
	var lines []map[string]any
	waitFor(t, 10*time.Second, "11 access log lines", func() bool {
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
		return len(lines) >= 11
	})
	forwarded := 0
	for _, l := range lines {
		ca, _ := l["client_address"].(string)
		peer, _ := l["peer"].(string)
		if !strings.HasPrefix(peer, "127.0.0.") {
			t.Errorf("peer %q, want the socket's", peer)
		}
		if ca == "10.1.1.1:0" {
			forwarded++
		}
	}
	if forwarded != 3 {
		t.Errorf("%d lines with client_address 10.1.1.1:0, want 3 (h1, h2, h3)", forwarded)
	}
}

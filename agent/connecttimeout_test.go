package agent

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/impulse-agent/impulse-agent/internal/testbackend"
)

// TestConnectTimeoutFires: a backend whose dials hang (a listener with a
// full accept queue: Linux drops the SYNs, as a non-routable address or a
// dropping firewall would) is given up after timeouts.connect: 502
// backend_connect_failed (README "Timeouts") after about the timeout, for
// HTTP/1.1 and HTTP/2-over-TLS backends. With the default retry
// (attempts = 2, connect-failure retried, POST included) the one backend
// is tried twice: about twice the timeout.
func TestConnectTimeoutFires(t *testing.T) {
	const connect = 300 * time.Millisecond
	hole := testbackend.FullBacklog(t)
	for _, scheme := range []string{"http", "https"} {
		for _, tc := range []struct {
			name, retry string
			tries       int
		}{
			{name: "attempts 1", retry: "retry {\n    attempts = 1\n  }", tries: 1},
			{name: "default retry", tries: 2},
		} {
			t.Run(scheme+"/"+tc.name, func(t *testing.T) {
				tlsBlock := ""
				if scheme == "https" {
					tlsBlock = "tls {\n    insecure_skip_verify = true\n  }"
				}
				r := start(t, baseConfig+fmt.Sprintf(`
upstream "hole" {
  route {}
  backend "h" {
    address = "%s://%s"
  }
  timeouts {
    connect = %q
  }
  %s
  %s
}
`, scheme, hole, connect, tc.retry, tlsBlock))
				for _, method := range []string{"GET", "POST"} {
					start := time.Now()
					req, _ := http.NewRequest(method, r.url("main", "/"), nil)
					resp, err := r.client.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					d := time.Since(start)
					want := time.Duration(tc.tries) * connect
					if resp.StatusCode != 502 || resp.Header.Get("X-Impulse-Error") != "backend_connect_failed" {
						t.Errorf("%s: %d %q, want 502 backend_connect_failed", method, resp.StatusCode, resp.Header.Get("X-Impulse-Error"))
					}
					// Back-off before a retry is under 25 ms; the rest is
					// scheduling on a loaded machine. The default connect
					// timeout (2s) would be far outside.
					if d < want || d > want+700*time.Millisecond {
						t.Errorf("%s: answered after %v, want about %v (%d × connect)", method, d, want, tc.tries)
					}
				}
			})
		}
	}
}

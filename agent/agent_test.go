package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/discovery"
	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type running struct {
	a      *Agent
	dir    string
	cfg    string
	client *http.Client
	logs   *syncBuffer
	stop   func() error
	roots  *x509.CertPool // trusts the listener certificate
}

// start runs an agent in-process on a config template; %[1]s and %[2]s are
// the certificate and key files.
func start(t *testing.T, config string) *running {
	t.Helper()
	dir := t.TempDir()
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, cert.CertPEM, 0o600)
	os.WriteFile(keyFile, cert.KeyPEM, 0o600)
	cfgFile := filepath.Join(dir, "gateway.hcl")
	if err := os.WriteFile(cfgFile, []byte(fmt.Sprintf(config, certFile, keyFile)), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	a, err := New(Options{ConfigPaths: []string{cfgFile}, LogOutput: logs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for a.ControlAddr() == nil || len(a.ListenerAddrs()) == 0 {
		select {
		case err := <-done:
			t.Fatalf("agent exited: %v\n%s", err, logs)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent did not start\n%s", logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: cert.Pool, ServerName: "localhost"}}
	r := &running{a: a, dir: dir, cfg: cfgFile, client: &http.Client{Transport: tr}, logs: logs, roots: cert.Pool}
	var once sync.Once
	var stopErr error
	r.stop = func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
			tr.Close()
		})
		return stopErr
	}
	t.Cleanup(func() {
		if err := r.stop(); err != nil {
			t.Errorf("agent stop: %v", err)
		}
		if t.Failed() {
			t.Logf("agent logs:\n%s", logs)
		}
	})
	return r
}

func (r *running) url(listener, path string) string {
	return "https://" + r.a.ListenerAddrs()[listener].String() + path
}

func (r *running) control(method, path, token string) (int, string) {
	req, _ := http.NewRequest(method, "http://"+r.a.ControlAddr().String()+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *running) get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := r.client.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const baseConfig = `
control {
  address = "127.0.0.1:0"
}
listener "main" {
  address = "127.0.0.1:0"
  tls {
    cert_file = %[1]q
    key_file  = %[2]q
  }
}
`

func backend(t *testing.T, name string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
	t.Cleanup(s.Close)
	return s
}

func TestReloadAddsRouteAndRejectsInvalid(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	cfg := baseConfig + fmt.Sprintf(`
upstream "a" {
  route {
    path_prefix = "/a"
  }
  backend "a" {
    address = %q
  }
}
`, a.URL)
	r := start(t, cfg)
	if code, body := r.get(t, r.url("main", "/a")); code != 200 || body != "a" {
		t.Fatalf("/a: %d %q", code, body)
	}
	if code, _ := r.get(t, r.url("main", "/b")); code != 404 {
		t.Fatalf("/b before reload: %d", code)
	}
	cert, key := filepath.Join(r.dir, "cert.pem"), filepath.Join(r.dir, "key.pem")
	withB := fmt.Sprintf(cfg, cert, key) + fmt.Sprintf(`
upstream "b" {
  route {
    path_prefix = "/b"
  }
  backend "b" {
    address = %q
  }
}
`, b.URL)
	os.WriteFile(r.cfg, []byte(withB), 0o600)
	code, body := r.control("POST", "/v1/reload", "")
	if code != 200 || !strings.Contains(body, `"generation": 2`) {
		t.Fatalf("reload: %d %s", code, body)
	}
	if code, body := r.get(t, r.url("main", "/b")); code != 200 || body != "b" {
		t.Fatalf("/b after reload: %d %q", code, body)
	}
	os.WriteFile(r.cfg, []byte(withB+"\nupstream \"broken\" {\n  route {\n    path_prefix = \"nope\"\n  }\n}\n"), 0o600)
	code, body = r.control("POST", "/v1/reload", "")
	if code != 400 || !strings.Contains(body, "gateway.hcl:") {
		t.Fatalf("invalid reload: %d %s", code, body)
	}
	if code, body := r.get(t, r.url("main", "/b")); code != 200 || body != "b" {
		t.Fatalf("/b after rejected reload: %d %q", code, body)
	}
}

func TestControlTokenAndSnapshots(t *testing.T) {
	a := backend(t, "a")
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("s3cret\n"), 0o600)
	cfg := strings.Replace(baseConfig, `address = "127.0.0.1:0"
}`, fmt.Sprintf("address = \"127.0.0.1:0\"\n  token_file = %q\n}", tokenFile), 1) + fmt.Sprintf(`
upstream "a" {
  route {
    host        = "*.example.com"
    path_prefix = "/"
  }
  backend "a-1" {
    address = %q
  }
}
`, a.URL)
	r := start(t, cfg)
	if code, _ := r.control("GET", "/v1/health", ""); code != 200 {
		t.Fatalf("/v1/health without token: %d", code)
	}
	if code, _ := r.control("GET", "/v1/backends", ""); code != 401 {
		t.Fatalf("/v1/backends without token: %d, want 401", code)
	}
	if code, _ := r.control("GET", "/v1/backends", "wrong"); code != 401 {
		t.Fatalf("/v1/backends wrong token: %d, want 401", code)
	}
	code, body := r.control("GET", "/v1/backends", "s3cret")
	var backends []map[string]any
	if err := json.Unmarshal([]byte(body), &backends); code != 200 || err != nil || len(backends) != 1 {
		t.Fatalf("/v1/backends: %d %s", code, body)
	}
	if backends[0]["id"] != "a-1" || backends[0]["protocol"] != "http/1.1" || backends[0]["membership"] != "active" {
		t.Fatalf("backend snapshot: %v", backends[0])
	}
	code, body = r.control("GET", "/v1/routes", "s3cret")
	if code != 200 || !strings.Contains(body, `"host": "*.example.com"`) {
		t.Fatalf("/v1/routes: %d %s", code, body)
	}
	code, body = r.control("GET", "/v1/ready", "s3cret")
	if code != 200 {
		t.Fatalf("/v1/ready: %d %s", code, body)
	}
	code, body = r.control("GET", "/metrics", "s3cret")
	if code != 200 || !strings.Contains(body, `impulse_quic_connections{listener="main"} 0`) {
		t.Fatalf("/metrics: %d, no impulse_quic_connections{listener=\"main\"} 0:\n%s", code, body)
	}
}

func TestMetricsCountRequests(t *testing.T) {
	a := backend(t, "a")
	r := start(t, baseConfig+fmt.Sprintf(`
upstream "a" {
  route {
    path_prefix = "/a"
  }
  backend "a" {
    address = %q
  }
}
`, a.URL))
	r.get(t, r.url("main", "/a"))
	r.get(t, r.url("main", "/missing"))
	_, body := r.control("GET", "/metrics", "")
	for _, want := range []string{
		`impulse_requests{code="2xx",listener="main",protocol="h3",reason="",upstream="a"} 1`,
		`impulse_requests{code="4xx",listener="main",protocol="h3",reason="no_route",upstream=""} 1`,
		`impulse_request_duration_count{code="2xx",listener="main",protocol="h3",upstream="a"} 1`,
		`impulse_request_duration_bucket{code="2xx",le="+Inf",listener="main",protocol="h3",upstream="a"} 1`,
		`impulse_request_duration_bucket{code="2xx",le="10000",listener="main",protocol="h3",upstream="a"} 1`,
		`impulse_request_duration_bucket{code="4xx",le="+Inf",listener="main",protocol="h3",upstream=""} 1`,
		`# TYPE impulse_request_duration_sum counter`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, unlabelled := range []string{"\nimpulse_requests 0\n", "\nimpulse_grpc_requests 0\n", "\nimpulse_upstream_backends_eligible 0\n", "\nimpulse_quic_connections 0\n", "\nimpulse_tcp_connections 0\n"} {
		if strings.Contains(body, unlabelled) {
			t.Errorf("metrics carry the unlabelled default series%q", unlabelled)
		}
	}
	// Every bucket of a histogram exists, cumulative counts never decrease.
	re := regexp.MustCompile(`(?m)^impulse_request_duration_bucket\{code="2xx",le="([^"]+)",listener="main",protocol="h3",upstream="a"\} (\d+)$`)
	m := re.FindAllStringSubmatch(body, -1)
	if len(m) != 14 {
		t.Fatalf("%d buckets for upstream a, want 14:\n%v", len(m), m)
	}
}

func TestShutdownDrainsAndReadinessDrops(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "part1;")
		w.(http.Flusher).Flush()
		close(started)
		<-release
		io.WriteString(w, "part2")
	}))
	defer slow.Close()
	r := start(t, baseConfig+fmt.Sprintf(`
upstream "slow" {
  route {
    path_prefix = "/"
  }
  backend "s" {
    address = %q
  }
}
`, slow.URL))
	result := make(chan string, 1)
	go func() {
		resp, err := r.client.Get(r.url("main", "/"))
		if err != nil {
			result <- err.Error()
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			result <- err.Error()
			return
		}
		result <- string(b)
	}()
	<-started
	stopped := make(chan error, 1)
	go func() { stopped <- r.stop() }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if code, body := r.control("GET", "/v1/ready", ""); code == 503 && strings.Contains(body, "draining") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("readiness did not drop while draining")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	if got := <-result; got != "part1;part2" {
		t.Fatalf("in-flight response: %q", got)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func TestSpecsFromSnapshot(t *testing.T) {
	s := discovery.Snapshot{Instances: []discovery.Instance{
		{ID: "n1/a", Address: "10.0.0.1", Port: 8080, Weight: 1},
		{ID: "n1/b", Address: "10.0.0.2", Port: 8443, Weight: 3, Meta: map[string]string{MetaScheme: "https"}},
		{ID: "n2/c", Address: "10.0.0.3", Port: 0},
		{ID: "n2/d", Address: "10.0.0.4", Port: 80, Meta: map[string]string{MetaScheme: "gopher"}},
		{ID: "n3/e", Address: "10.0.0.5", Port: 9090, Meta: map[string]string{MetaScheme: "h2c"}},
	}}
	got, skipped := specs(s, "http")
	if len(got) != 5 || got[4].Scheme != "h2c" || got[4].Suppressed != "" || got[0].Scheme != "http" || got[1].Scheme != "https" || got[1].Weight != 300 ||
		got[0].Suppressed != "" || got[2].Suppressed != "unusable port 0" || got[3].Suppressed != `unusable impulse-scheme "gopher"` {
		t.Fatalf("specs = %+v", got)
	}
	if strings.Join(skipped, ",") != "n2/c,n2/d" {
		t.Fatalf("skipped = %v", skipped)
	}
}

// catchAll is an upstream routing every path to one backend at url.
func catchAll(url string) string {
	return fmt.Sprintf(`
upstream "a" {
  route {
    path_prefix = "/"
  }
  backend "a-1" {
    address = %q
  }
}
`, url)
}

func TestDebugEndpointsOnlyWhenEnabled(t *testing.T) {
	up := catchAll(backend(t, "a").URL)
	off := start(t, baseConfig+up)
	if code, _ := off.control("GET", "/debug/pprof/", ""); code != 404 {
		t.Fatalf("/debug/pprof/ without enable_debug: %d, want 404", code)
	}
	on := start(t, strings.Replace(baseConfig, `address = "127.0.0.1:0"
}`, "address = \"127.0.0.1:0\"\n  enable_debug = true\n}", 1)+up)
	if code, body := on.control("GET", "/debug/pprof/", ""); code != 200 || !strings.Contains(body, "goroutine") {
		t.Fatalf("/debug/pprof/ with enable_debug: %d", code)
	}
}

// TestReloadAppliesControlToken: adding control.token_file by a reload
// protects the control API at once, rotating the file's content rotates
// the token, and removing it opens the API again.
func TestReloadAppliesControlToken(t *testing.T) {
	r := start(t, baseConfig+catchAll(backend(t, "a").URL))
	tokenFile := filepath.Join(r.dir, "token")
	os.WriteFile(tokenFile, []byte("one\n"), 0o600)
	cfgFile := filepath.Join(r.dir, "gateway.hcl")
	plain, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	withToken := strings.Replace(string(plain), `address = "127.0.0.1:0"
}`, fmt.Sprintf("address = \"127.0.0.1:0\"\n  token_file = %q\n}", tokenFile), 1)
	reload := func(cfg string) {
		t.Helper()
		os.WriteFile(cfgFile, []byte(cfg), 0o600)
		if _, _, err := r.a.Reload(); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(token string, want int) {
		t.Helper()
		if code, body := r.control("GET", "/v1/backends", token); code != want {
			t.Fatalf("/v1/backends with token %q: %d %s, want %d", token, code, body, want)
		}
	}
	expect("", 200)
	reload(withToken)
	expect("", 401)
	expect("one", 200)
	os.WriteFile(tokenFile, []byte("two\n"), 0o600)
	reload(withToken)
	expect("one", 401)
	expect("two", 200)
	os.WriteFile(tokenFile, []byte(" \n"), 0o600) // a rotation caught mid-write
	if _, _, err := r.a.Reload(); err == nil || !strings.Contains(err.Error(), "holds no token") {
		t.Fatalf("reload with an empty token file: %v", err)
	}
	expect("", 401)
	expect("two", 200)
	reload(string(plain))
	expect("", 200)
}

// TestReloadLogsWarnings: a reload's configuration warnings (here a
// forward_client_cert without client certificates) are logged like those
// found at start.
func TestReloadLogsWarnings(t *testing.T) {
	r := start(t, baseConfig)
	if strings.Contains(r.logs.String(), "Nothing to forward") {
		t.Fatalf("warning before the reload:\n%s", r.logs)
	}
	cert, key := filepath.Join(r.dir, "cert.pem"), filepath.Join(r.dir, "key.pem")
	withWarning := strings.Replace(fmt.Sprintf(baseConfig, cert, key), "tls {", "tls {\n    forward_client_cert = true", 1)
	os.WriteFile(r.cfg, []byte(withWarning), 0o600)
	if code, body := r.control("POST", "/v1/reload", ""); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if !strings.Contains(r.logs.String(), "Nothing to forward") {
		t.Fatalf("the reload's warning was not logged:\n%s", r.logs)
	}
}

// TestConsulTokenFileBOM: a Consul token_file written by a Windows editor
// (UTF-8 byte order mark, CRLF) yields the token itself.
func TestConsulTokenFileBOM(t *testing.T) {
	f := filepath.Join(t.TempDir(), "consul.token")
	os.WriteFile(f, []byte("\ufeffs3cret\r\n"), 0o600)
	if got, err := resolveToken(&hcl.Consul{TokenFile: f}); err != nil || got != "s3cret" {
		t.Fatalf("resolveToken = %q, %v; want s3cret", got, err)
	}
}

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// probeServer is an in-process HTTP/3 server on a random loopback UDP port.
type probeServer struct {
	url    string // https://127.0.0.1:PORT
	caFile string // PEM of the server's self-signed certificate
	conns  atomic.Int32
}

func startProbeServer(t *testing.T, h http.HandlerFunc) *probeServer {
	t.Helper()
	cert, err := selfsigned.New("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ps := &probeServer{caFile: filepath.Join(t.TempDir(), "ca.pem")}
	if err := os.WriteFile(ps.caFile, cert.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http3.Server{
		Handler:   h,
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert.TLS}}),
		ConnContext: func(ctx context.Context, _ *quic.Conn) context.Context {
			ps.conns.Add(1)
			return ctx
		},
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(pc) }()
	t.Cleanup(func() {
		_ = srv.Close()
		_ = pc.Close()
		wg.Wait()
	})
	ps.url = "https://" + pc.LocalAddr().String()
	return ps
}

// probe runs runProbe and returns exit code, stdout and stderr.
func probe(t *testing.T, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	var out, errOut bytes.Buffer
	code := runProbe(args, stdin, &out, &errOut)
	t.Logf("probe %q -> %d\nstderr:\n%s", args, code, errOut.String())
	return code, out.String(), errOut.String()
}

func TestProbeGET(t *testing.T) {
	ps := startProbeServer(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s %s", r.Method, r.URL.Path)
	})
	code, out, _ := probe(t, nil, "-cacert", ps.caFile, ps.url+"/x")
	if code != 0 || out != "hello GET /x" {
		t.Fatalf("code=%d out=%q", code, out)
	}
}

func TestProbe503ExitsOne(t *testing.T) {
	ps := startProbeServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	})
	code, out, _ := probe(t, nil, "-cacert", ps.caFile, ps.url)
	if code != 1 || out != "down\n" {
		t.Fatalf("code=%d out=%q", code, out)
	}
}

func TestProbeVerbose(t *testing.T) {
	ps := startProbeServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("X-Zeta", "last")
		w.Header().Set("X-Alpha", "first")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
	})
	// Flags after the URL are accepted too.
	code, out, errOut := probe(t, nil, "-cacert", ps.caFile, ps.url+"/v?q=1", "-v")
	if code != 0 || out != "body" {
		t.Fatalf("code=%d out=%q", code, out)
	}
	for _, want := range []string{"> GET /v?q=1 HTTP/3\n", "< HTTP/3 201\n", "< x-alpha: first\n", "< x-checksum: abc\n"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if a, z := strings.Index(errOut, "x-alpha"), strings.Index(errOut, "x-zeta"); a < 0 || z < a {
		t.Errorf("headers not sorted: alpha at %d, zeta at %d", a, z)
	}
	if strings.Index(errOut, "x-checksum: abc") < strings.Index(errOut, "x-zeta") {
		t.Errorf("trailer not printed after the headers")
	}
}

func TestProbeCountOneConnection(t *testing.T) {
	var n atomic.Int32
	ps := startProbeServer(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 5 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		io.WriteString(w, "discarded")
	})
	code, out, errOut := probe(t, nil, "-cacert", ps.caFile, "-n", "10", ps.url)
	if code != 1 {
		t.Errorf("code=%d, want 1 (one 503)", code)
	}
	if out != "" {
		t.Errorf("bodies printed with -n 10: %q", out)
	}
	if want := "200: 9\n503: 1\nerrors: 0\n"; errOut != want {
		t.Errorf("tally %q, want %q", errOut, want)
	}
	if got := ps.conns.Load(); got != 1 {
		t.Errorf("server saw %d connections, want 1", got)
	}

	code, _, errOut = probe(t, nil, "-cacert", ps.caFile, "-n", "3", ps.url)
	if code != 0 || errOut != "200: 3\nerrors: 0\n" {
		t.Errorf("code=%d tally=%q", code, errOut)
	}
}

func TestProbeData(t *testing.T) {
	ps := startProbeServer(t, func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s %d %x", r.Method, n, h.Sum(nil))
	})
	payload := make([]byte, 1<<20+7)
	rand.Read(payload)
	file := filepath.Join(t.TempDir(), "body.bin")
	if err := os.WriteFile(file, payload, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

	code, out, _ := probe(t, nil, "-cacert", ps.caFile, "-d", "@"+file, ps.url)
	if want := fmt.Sprintf("POST %d %s", len(payload), sum(payload)); code != 0 || out != want {
		t.Errorf("@file: code=%d out=%q want %q", code, out, want)
	}
	code, out, _ = probe(t, bytes.NewReader(payload), "-cacert", ps.caFile, "-X", "PUT", "-d", "@-", ps.url)
	if want := fmt.Sprintf("PUT %d %s", len(payload), sum(payload)); code != 0 || out != want {
		t.Errorf("@-: code=%d out=%q want %q", code, out, want)
	}
	code, out, _ = probe(t, nil, "-cacert", ps.caFile, "-d", "a=1", ps.url)
	if want := "POST 3 " + sum([]byte("a=1")); code != 0 || out != want {
		t.Errorf("literal: code=%d out=%q want %q", code, out, want)
	}
}

func TestProbeHeadersAndHost(t *testing.T) {
	ps := startProbeServer(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s|%s|%s|%s", r.Host, r.Header.Get("X-Probe"),
			strings.Join(r.Header.Values("X-Multi"), ","), r.Header.Get("User-Agent"))
	})
	code, out, _ := probe(t, nil, "-cacert", ps.caFile, "-H", "X-Probe: hello world",
		"-H", "X-Multi: a", "-H", "X-Multi: b", "-H", "Host: example.test", ps.url)
	if want := "example.test|hello world|a,b|" + probeUserAgent; code != 0 || out != want {
		t.Fatalf("code=%d out=%q want %q", code, out, want)
	}
}

func TestProbeTLSTrust(t *testing.T) {
	ps := startProbeServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	code, out, errOut := probe(t, nil, ps.url)
	if code != 1 || out != "" || !strings.Contains(errOut, "certificate") {
		t.Errorf("untrusted: code=%d out=%q stderr=%q", code, out, errOut)
	}
	if code, out, _ := probe(t, nil, "-insecure", ps.url); code != 0 || out != "ok" {
		t.Errorf("-insecure: code=%d out=%q", code, out)
	}
}

// signalWriter closes got on its first non-empty Write. (The buffer is not
// embedded: bytes.Buffer's ReadFrom would bypass Write in io.Copy.)
type signalWriter struct {
	buf  bytes.Buffer
	once sync.Once
	got  chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.buf.Write(p)
	if n > 0 {
		w.once.Do(func() { close(w.got) })
	}
	return n, err
}

func TestProbeStreamResetMidBody(t *testing.T) {
	out := &signalWriter{got: make(chan struct{})}
	ps := startProbeServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		select { // reset only once the client has printed part of the body
		case <-out.got:
		case <-r.Context().Done():
		}
		panic(http.ErrAbortHandler)
	})
	var errOut bytes.Buffer
	code := runProbe([]string{"-cacert", ps.caFile, ps.url}, strings.NewReader(""), out, &errOut)
	t.Logf("stderr: %s", errOut.String())
	if code != 1 || out.buf.String() != "partial" || !strings.Contains(errOut.String(), "probe: reading body (status 200)") {
		t.Fatalf("code=%d stdout=%q stderr=%q", code, out.buf.String(), errOut.String())
	}
}

func TestProbeUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"http://127.0.0.1:1/"},
		{"127.0.0.1:1"},
		{},
		{"https://a/", "https://b/"},
		{"-n", "0", "https://a/"},
		{"-H", "NoColon", "https://a/"},
		{"-d", "@-", "-n", "2", "https://a/"},
		{"-d", "@/nonexistent/file", "https://a/"},
		{"-cacert", "/nonexistent/ca.pem", "https://a/"},
		{"-bogus", "https://a/"},
	} {
		if code, _, _ := probe(t, nil, args...); code != 2 {
			t.Errorf("probe %q: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := probe(t, nil, "-h"); code != 0 || !strings.Contains(errOut, "-insecure") {
		t.Errorf("-h: code=%d usage=%q", code, errOut)
	}
}

// TestProbeBadHostIsUsageError: a Host quic-go's client cannot encode is a
// usage error at once, not a request that never leaves and times out.
func TestProbeBadHostIsUsageError(t *testing.T) {
	for _, host := range []string{"a b", "a\"b", "a<b>"} {
		code, _, errOut := probe(t, nil, "-timeout", "30s", "-H", "Host: "+host, "https://127.0.0.1:1/")
		if code != 2 || !strings.Contains(errOut, "bad Host") {
			t.Errorf("Host %q: exit %d, %q; want usage error 2", host, code, errOut)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
)

// traefikStatic is Traefik's static configuration: one entry point on
// 127.0.0.1:port with TLS and HTTP/3 (UDP on the same port), the file
// provider reading dynamicFile, no dashboard, API, metrics or access log
// (all off by default), no version check and no usage report.
func traefikStatic(port int, dynamicFile string) string {
	return fmt.Sprintf(`global:
  checkNewVersion: false
  sendAnonymousUsage: false
log:
  level: ERROR
entryPoints:
  websecure:
    address: "127.0.0.1:%d"
    http:
      tls: {}
    http3: {}
providers:
  file:
    filename: %q
    watch: false
`, port, dynamicFile)
}

// traefikDynamic is Traefik's dynamic configuration: every path of the
// entry point routed to one service, a load balancer with the HTTP/1.1
// backend (http:// URLs are HTTP/1.1 in Traefik's default transport), and
// the bench certificate as the default certificate.
func traefikDynamic(backendH1, certFile, keyFile string) string {
	return fmt.Sprintf(`http:
  routers:
    bench:
      rule: "PathPrefix(`+"`/`"+`)"
      entryPoints: [websecure]
      service: bench
      tls: {}
  services:
    bench:
      loadBalancer:
        servers:
          - url: "http://%s"
tls:
  stores:
    default:
      defaultCertificate:
        certFile: %q
        keyFile: %q
`, backendH1, certFile, keyFile)
}

// startTraefik starts Traefik on the server core.
func (e *env) startTraefik() (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dyn := filepath.Join(e.dir, "traefik-dynamic.yml")
	static := filepath.Join(e.dir, "traefik.yml")
	if err := os.WriteFile(dyn, []byte(traefikDynamic(e.backendH1, e.certFile, e.keyFile)), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(static, []byte(traefikStatic(port, dyn)), 0o644); err != nil {
		return nil, err
	}
	home := filepath.Join(e.dir, "traefik-home")
	c, err := e.start(keyTraefik, e.sutCPU, []string{e.traefikBin, "--configFile=" + static}, "HOME="+home)
	if err != nil {
		return nil, err
	}
	return e.ready(&server{Key: keyTraefik, Proto: "h3", Base: fmt.Sprintf("https://127.0.0.1:%d", port), proc: c})
}

// reVersion finds a version number such as 2.11.9 or v3.6.12.
var reVersion = regexp.MustCompile(`v?(\d+\.\d+\.\d+)`)

// binaryVersion returns the first version number bin prints for args
// ("version" for Caddy and Traefik), or "".
func binaryVersion(bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		return ""
	}
	if m := reVersion.FindStringSubmatch(string(out)); m != nil {
		return m[1]
	}
	return ""
}

// caddyModuleVersion returns the version of the Caddy module in `caddy
// build-info` ("mod github.com/caddyserver/caddy/v2 v2.11.9 h1:..."): a
// `go install` build says "unknown" to `caddy version`.
func caddyModuleVersion(bin string) string {
	out, err := exec.Command(bin, "build-info").Output()
	if err != nil {
		return ""
	}
	for l := range strings.Lines(string(out)) {
		if f := strings.Fields(l); len(f) >= 3 && f[1] == "github.com/caddyserver/caddy/v2" {
			return strings.TrimPrefix(f[2], "v")
		}
	}
	return ""
}

// labelVersions puts the versions of the proxies in their row labels:
// "caddy 2.11.9 → h1".
func (e *env) labelVersions() {
	for key, bin := range map[string]string{keyCaddy: e.caddyBin, keyCaddyDeb: e.caddyDebBin, keyTraefik: e.traefikBin} {
		if bin == "" {
			continue
		}
		v := binaryVersion(bin, "version")
		if v == "" && key != keyTraefik {
			v = caddyModuleVersion(bin)
		}
		if v != "" {
			name, rest, _ := strings.Cut(targetLabels[key], " ")
			targetLabels[key] = name + " " + v + " " + rest
		}
	}
}

// probe makes one GET /small to s over proto ("h1" or "h2" over TLS, "h3"),
// and reports whether it succeeded: the TCP section skips servers that do
// not serve TCP.
func (e *env) probe(s *server, proto string) error {
	cfg := &LoadConfig{Proto: proto, Method: http.MethodGet, URL: s.Base + "/small", CACert: e.certFile,
		Expect: smallSize, Timeout: 3 * time.Second, Streams: 1}
	tc, err := clientTLS(cfg)
	if err != nil {
		return err
	}
	rt, release := newRoundTripper(cfg, tc)
	defer release()
	return exchange(context.Background(), cfg, rt, make([]byte, 4096), new(atomic.Int64))
}

package agent

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// Default -dev addresses (interface.md).
const (
	DevListenerAddress = "127.0.0.1:8443"
	DevControlAddress  = "127.0.0.1:9901"
)

// devEnv is what -dev brings up besides the gateway: a self-signed
// certificate in a temporary directory and two demo HTTP/1.1 backends that
// answer with their own name.
type devEnv struct {
	dir      string
	config   []byte
	backends []*http.Server
	once     sync.Once // close: from Run's return and from ForceClose
}

// devConfig is the embedded default configuration; %s are filled in with the
// generated certificate and the demo backends' addresses.
const devConfig = `# impulse-agent -dev: the embedded default configuration.
log_level     = "info"
drain_timeout = "5s"

control {
  address = %q
}

listener "dev" {
  address = %q
  tls {
    cert_file = %q
    key_file  = %q
  }
}

upstream "dev" {
  load_balancing = "round_robin"
  route {
    path_prefix = "/"
  }
  backend "dev-1" {
    address = "http://%s"
  }
  backend "dev-2" {
    address = "http://%s"
  }
}
`

func startDev(listenAddr, controlAddr string) (*devEnv, error) {
	if listenAddr == "" {
		listenAddr = DevListenerAddress
	}
	if controlAddr == "" {
		controlAddr = DevControlAddress
	}
	cert, err := selfsigned.New(devCertNames(listenAddr)...)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "impulse-agent-dev-")
	if err != nil {
		return nil, fmt.Errorf("agent: -dev: %w", err)
	}
	d := &devEnv{dir: dir}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, cert.CertPEM, 0o644); err != nil {
		d.close()
		return nil, fmt.Errorf("agent: -dev: %w", err)
	}
	if err := os.WriteFile(keyFile, cert.KeyPEM, 0o600); err != nil {
		d.close()
		return nil, fmt.Errorf("agent: -dev: %w", err)
	}
	var addrs []string
	for _, name := range []string{"dev-1", "dev-2"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			d.close()
			return nil, fmt.Errorf("agent: -dev backend: %w", err)
		}
		srv := &http.Server{Handler: demoBackend(name)}
		go func() { _ = srv.Serve(ln) }()
		d.backends = append(d.backends, srv)
		addrs = append(addrs, ln.Addr().String())
	}
	d.config = fmt.Appendf(nil, devConfig, controlAddr, listenAddr, certFile, keyFile, addrs[0], addrs[1])
	return d, nil
}

// demoBackend answers every request with its name, method and path.
func demoBackend(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Backend", name)
		fmt.Fprintf(w, "hello from %s: %s %s (forwarded for %s)\n", name, r.Method, r.URL.RequestURI(), r.Header.Get("X-Forwarded-For"))
	})
}

// announce logs what to try once the listener is up.
func (d *devEnv) announce(log hclog.Logger, addrs map[string]net.Addr) {
	addr := addrs["dev"]
	if addr == nil {
		return
	}
	cert := filepath.Join(d.dir, "cert.pem")
	exe, _ := os.Executable()
	cwd, _ := os.Getwd()
	target := dialable(addr)
	log.Info("dev mode: try it", "command", fmt.Sprintf("%s probe -cacert %s https://%s/", selfCommand(exe, cwd), cert, target),
		"curl", fmt.Sprintf("curl --cacert %s https://%s/", cert, target),
		"curl_http3", fmt.Sprintf("curl --http3-only --cacert %s https://%s/", cert, target))
}

// devCertNames are the names the -dev certificate covers: localhost, the
// loopback addresses, and the -dev-listen host when it is a specific one
// (127.0.0.2, a LAN address), so the logged probe command verifies.
func devCertNames(listenAddr string) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	host, _, err := net.SplitHostPort(listenAddr)
	if ip, perr := netip.ParseAddr(host); err == nil && perr == nil && !ip.IsUnspecified() && !slices.Contains(names, ip.String()) {
		names = append(names, ip.String())
	} else if err == nil && perr != nil && host != "" && host != "localhost" {
		names = append(names, host)
	}
	return names
}

// dialable is addr as a client on this host reaches it: a wildcard address
// (0.0.0.0, ::) becomes the loopback one of its family, which the -dev
// certificate names.
func dialable(addr net.Addr) string {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil || !ap.Addr().IsUnspecified() {
		return addr.String()
	}
	lo := netip.IPv6Loopback()
	if ap.Addr().Unmap().Is4() {
		lo = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	return netip.AddrPortFrom(lo, ap.Port()).String()
}

// selfCommand is how a user runs this program again, as a shell command
// prefix: the executable's path, or, when it is a binary that `go run`
// built into the Go build cache or a temporary go-build directory (gone or
// unknown to the user), "go run ./cmd/impulse-agent" when the working
// directory is the repository root, else "go run <main package path>"
// (which works anywhere inside the module).
func selfCommand(exe, cwd string) string {
	if exe == "" {
		return "impulse-agent"
	}
	built := false
	for _, part := range strings.Split(filepath.ToSlash(exe), "/") {
		if strings.HasPrefix(part, "go-build") {
			built = true
		}
	}
	if !built {
		return exe
	}
	if fi, err := os.Stat(filepath.Join(cwd, "cmd", "impulse-agent")); err == nil && fi.IsDir() {
		return "go run ./cmd/impulse-agent"
	}
	pkg := "github.com/impulse-agent/impulse-agent/cmd/impulse-agent"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Path != "" {
		pkg = bi.Path
	}
	return "go run " + pkg
}

// close stops the demo backends and removes the temporary directory; safe
// to call more than once and concurrently.
func (d *devEnv) close() {
	d.once.Do(func() {
		for _, s := range d.backends {
			_ = s.Close()
		}
		_ = os.RemoveAll(d.dir)
	})
}

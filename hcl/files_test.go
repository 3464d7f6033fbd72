package hcl

import (
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// certAbs returns the absolute path of a committed test certificate, for
// configurations written outside the package directory.
func certAbs(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join(certDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func listenerHCL(t *testing.T) string {
	return `listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "` + certAbs(t, "cert.pem") + `"
    key_file  = "` + certAbs(t, "key.pem") + `"
  }
}
`
}

// TestConfigDirectoryFiles: a directory contributes regular *.hcl and *.json
// files not starting with "."; symbolic links to files are followed, links
// to directories skipped like directories, and editor lock and backup files
// never read.
func TestConfigDirectoryFiles(t *testing.T) {
	dir := t.TempDir()
	other := t.TempDir()
	writeFile(t, dir, "10-listener.hcl", []byte(listenerHCL(t)))
	writeFile(t, dir, "20-web.json", []byte(`{"upstream": {"web": {"route": {}, "backend": {"a": {"address": "http://127.0.0.1:8080"}}}}}`))
	target := writeFile(t, other, "api.conf", []byte(`upstream "api" {
  route {
    path_prefix = "/api"
  }
  backend "a" {
    address = "http://127.0.0.1:8081"
  }
}
`))
	if err := os.Symlink(target, filepath.Join(dir, "30-api.hcl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(dir, "40-linked-dir.hcl")); err != nil {
		t.Fatal(err)
	}
	broken := []byte("upstream \"web\" {\n  route {\n")
	writeFile(t, dir, ".20-web.hcl.swp", broken)
	writeFile(t, dir, "20-web.hcl~", broken)
	writeFile(t, dir, ".hidden.json", broken)
	writeFile(t, dir, "README.md", broken)
	// Emacs' lock file: a dangling symbolic link named .#FILE.
	if err := os.Symlink("user@host.1234:1700000000", filepath.Join(dir, ".#20-web.hcl")); err != nil {
		t.Fatal(err)
	}

	cfg, diags := Load([]string{dir})
	if diags.HasErrors() {
		t.Fatal(linesOf(diags))
	}
	want := []string{filepath.Join(dir, "10-listener.hcl"), filepath.Join(dir, "20-web.json"), filepath.Join(dir, "30-api.hcl")}
	if !reflect.DeepEqual(cfg.Files, want) {
		t.Errorf("Files = %v, want %v", cfg.Files, want)
	}
	if len(cfg.Upstreams) != 2 || cfg.Upstreams[0].Name != "web" || cfg.Upstreams[1].Name != "api" {
		t.Errorf("upstreams = %+v", cfg.Upstreams)
	}

	// A special file is skipped with a warning, never opened (a FIFO would
	// block the reader).
	if err := syscall.Mkfifo(filepath.Join(dir, "50-fifo.hcl"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, diags = Load([]string{dir})
	if diags.HasErrors() || len(cfg.Warnings) != 1 || !strings.Contains(linesOf(cfg.Warnings), `warning: Skipped configuration file: "`+filepath.Join(dir, "50-fifo.hcl")+`" is not a regular file`) {
		t.Errorf("fifo: %s", linesOf(diags))
	}
}

// TestDanglingSymlink: a dangling symbolic link, given or found in a
// directory, is an error naming the link, its target and the OS reason; the
// other files still load, but "no listener" is not claimed.
func TestDanglingSymlink(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "00-listener.hcl")
	gone := filepath.Join(dir, "moved-away.hcl")
	if err := os.Symlink(gone, link); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "10-web.hcl", []byte(testUpstream))
	want := `Cannot read configuration: "` + link + `" is a symbolic link to "` + gone + `", which cannot be read: no such file or directory.`
	for _, paths := range [][]string{{dir}, {link, filepath.Join(dir, "10-web.hcl")}} {
		cfg, diags := Load(paths)
		got := linesOf(diags)
		if cfg != nil || !strings.Contains(got, want) || strings.Contains(got, "No listener") {
			t.Errorf("Load(%v):\n%s\nwant %q and no \"No listener\"", paths, got, want)
		}
	}
	_, diags := Load([]string{filepath.Join(dir, "missing.hcl")})
	if got := linesOf(diags); !strings.Contains(got, `Cannot read configuration: cannot read "`+filepath.Join(dir, "missing.hcl")+`": no such file or directory.`) {
		t.Errorf("missing file: %s", got)
	}
	// A file that exists but cannot be read (tests often run as root, for
	// whom permissions never fail; /proc/self/mem fails at offset 0).
	if runtime.GOOS == "linux" {
		_, diags := Load([]string{"/proc/self/mem"})
		if got := linesOf(diags); !strings.Contains(got, `Cannot read configuration: cannot read "/proc/self/mem": input/output error.`) {
			t.Errorf("unreadable file: %s", got)
		}
	}
}

// TestJSONConfig: a .json file is HCL's JSON syntax with the same schema,
// defaults and diagnostics as the native syntax.
func TestJSONConfig(t *testing.T) {
	cfg, diags := Load([]string{"testdata/good/json.json"})
	if diags.HasErrors() {
		t.Fatal(linesOf(diags))
	}
	if cfg.DrainTimeout != 10*time.Second || cfg.Consul == nil || cfg.Consul.TLS.CAFile != "testdata/certs/ca.pem" {
		t.Errorf("globals: %+v %+v", cfg, cfg.Consul)
	}
	l := cfg.Listeners[0]
	if l.Name != "public" || l.Address != "127.0.0.1:8443" || l.TLS.KeyFile != "testdata/certs/key.pem" || l.Range.Start.Line != 8 {
		t.Errorf("listener = %+v", l)
	}
	u := cfg.Upstreams[0]
	if u.Name != "web" || u.LoadBalancing != "least_request" || len(u.Routes) != 2 || u.Routes[1].PathPrefix != "/api" ||
		!reflect.DeepEqual(u.Routes[0].Methods, []string{"GET", "HEAD"}) || len(u.Backends) != 2 ||
		u.Backends[0].Weight != 50 || u.Backends[1].Weight != DefaultWeight || u.Backends[1].Port != 8081 ||
		!reflect.DeepEqual(u.Consul.Tags, []string{"v1"}) || u.Consul.Scheme != "http" ||
		u.HealthCheck.Path != "/healthz" || u.HealthCheck.Interval != 2*time.Second || u.Timeouts.Connect != time.Second {
		t.Errorf("upstream = %+v", u)
	}

	// Parse picks the syntax by the file name too.
	src := `{"listener": {"public": {"address": "127.0.0.1:8443", "tls": {"cert_file": "testdata/certs/cert.pem", "key_file": "testdata/certs/key.pem"}}},
 "drain_timeout": "5"}`
	_, diags = Parse("inline.json", []byte(src))
	if got := linesOf(diags); !strings.Contains(got, `inline.json:2:19: Invalid duration: drain_timeout: "5" is not a duration`) {
		t.Errorf("inline JSON: %s", got)
	}
	_, diags = Parse("broken.json", []byte(`{"listener": `))
	if got := linesOf(diags); !diags.HasErrors() || !strings.HasPrefix(got, "broken.json:1:") || strings.Contains(got, "No listener") {
		t.Errorf("broken JSON: %s", got)
	}
}

// TestNoListener: a configuration without any listener is an error on every
// path through the loader (validate, start and reload all call Load or
// Parse), but not on top of a syntax error: the broken file may hold it.
func TestNoListener(t *testing.T) {
	for name, src := range map[string]string{"empty": "", "comment only": "# truncated\n", "upstream only": testUpstream} {
		_, diags := Parse("gateway.hcl", []byte(src))
		if got := linesOf(diags); !strings.HasPrefix(got, "gateway.hcl:1:1: No listener: no listener block in any of: gateway.hcl;") {
			t.Errorf("%s: %s", name, got)
		}
	}
	_, diags := Parse("gateway.hcl", []byte(testUpstream+"listener \"public\" {\n  address = "))
	if got := linesOf(diags); !diags.HasErrors() || strings.Contains(got, "No listener") {
		t.Errorf("truncated: %s", got)
	}
}

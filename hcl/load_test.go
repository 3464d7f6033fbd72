package hcl

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
)

const testListener = `
listener "public" {
  address = "127.0.0.1:8443"
  tls {
    cert_file = "testdata/certs/cert.pem"
    key_file  = "testdata/certs/key.pem"
  }
}
`

const testUpstream = `
upstream "web" {
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}
`

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	cfg, diags := Parse("test.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatalf("unexpected errors:\n%s", linesOf(diags))
	}
	return cfg
}

func parseErrors(t *testing.T, src string) string {
	t.Helper()
	cfg, diags := Parse("test.hcl", []byte(src))
	if !diags.HasErrors() {
		t.Fatalf("no error for:\n%s", src)
	}
	if cfg != nil {
		t.Error("Config returned despite errors")
	}
	return linesOf(diags)
}

func TestDefaults(t *testing.T) {
	cfg := mustParse(t, testListener+testUpstream)
	if cfg.LogLevel != "info" || cfg.LogJSON || cfg.DrainTimeout != 30*time.Second {
		t.Errorf("globals: %q %v %v", cfg.LogLevel, cfg.LogJSON, cfg.DrainTimeout)
	}
	if cfg.Consul != nil {
		t.Errorf("Consul = %+v, want nil", cfg.Consul)
	}
	if cfg.Control != (Control{Address: "127.0.0.1:9901"}) {
		t.Errorf("Control = %+v", cfg.Control)
	}
	if !cfg.Telemetry.Equal(Telemetry{PrometheusRetention: 24 * time.Hour, DisableHostname: true}) {
		t.Errorf("Telemetry = %+v", cfg.Telemetry)
	}
	if len(cfg.Listeners) != 1 || !slices.Equal(cfg.Listeners[0].Protocols, []string{"h1", "h2", "h3"}) || cfg.Listeners[0].AltSvcMaxAge != 24*time.Hour {
		t.Fatalf("Listeners = %+v", cfg.Listeners)
	}
	l := cfg.Listeners[0]
	if l.Range.Filename != "test.hcl" || l.Range.Start.Line != 2 {
		t.Errorf("listener range = %v", l.Range)
	}
	u := cfg.Upstreams[0]
	if u.LoadBalancing != "round_robin" || u.HashOn != "" || u.Timeouts != (Timeouts{2 * time.Second, 30 * time.Second, 90 * time.Second, 60 * time.Second, 0}) {
		t.Errorf("upstream = %+v", u)
	}
	if u.Consul != nil || u.HealthCheck != nil || u.OutlierDetection != nil || u.TLS != nil {
		t.Errorf("optional blocks set: %+v", u)
	}
	if len(u.Routes) != 1 || u.Routes[0].Host != "" || u.Routes[0].PathPrefix != "/" || u.Routes[0].Methods != nil {
		t.Errorf("routes = %+v", u.Routes)
	}
	want := Backend{Name: "a", Address: "http://127.0.0.1:8080", Scheme: "http", Host: "127.0.0.1", Port: 8080, Weight: 100, Range: u.Backends[0].Range}
	if u.Backends[0] != want {
		t.Errorf("backend = %+v", u.Backends[0])
	}
	if len(cfg.Warnings) != 0 || !reflect.DeepEqual(cfg.Files, []string{"test.hcl"}) {
		t.Errorf("warnings %v files %v", cfg.Warnings, cfg.Files)
	}

	// A file with only a listener gives Default() plus the listener.
	only := mustParse(t, testListener)
	only.Files, only.Listeners = nil, nil
	if !reflect.DeepEqual(only, Default()) {
		t.Errorf("listener-only file = %+v, want %+v", only, Default())
	}
}

func TestBlockDefaults(t *testing.T) {
	cfg := mustParse(t, testListener+`
consul {}
upstream "web" {
  route {}
  consul {
    service = "web"
  }
  health_check {}
  outlier_detection {}
  timeouts {
    connect = "250ms"
  }
}`)
	c := cfg.Consul
	if c == nil || c.Address != "127.0.0.1:8500" || c.Scheme != "http" || c.Wait != 5*time.Minute || c.TLS != nil || c.Register != nil {
		t.Errorf("consul = %+v", c)
	}
	u := cfg.Upstreams[0]
	if !reflect.DeepEqual(*u.Consul, UpstreamConsul{Service: "web", Health: "passing", Scheme: "https"}) {
		t.Errorf("upstream consul = %+v", u.Consul)
	}
	if *u.HealthCheck != (HealthCheck{Path: "/health", Interval: 5 * time.Second, Timeout: time.Second, HealthyThreshold: 2, UnhealthyThreshold: 3, UnknownIsHealthy: true}) {
		t.Errorf("health_check = %+v", u.HealthCheck)
	}
	if *u.OutlierDetection != (OutlierDetection{Enabled: true, ConsecutiveFailures: 5, BaseEjectionTime: 10 * time.Second, MaxEjectionPercent: 100}) {
		t.Errorf("outlier_detection = %+v", u.OutlierDetection)
	}
	if u.Timeouts != (Timeouts{250 * time.Millisecond, 30 * time.Second, 90 * time.Second, 60 * time.Second, 0}) {
		t.Errorf("timeouts = %+v", u.Timeouts)
	}
	if len(cfg.Warnings) != 0 {
		t.Errorf("warnings:\n%s", linesOf(cfg.Warnings))
	}
}

func TestDurations(t *testing.T) {
	tests := []struct {
		val  string
		want time.Duration
		err  string
	}{
		{`"250ms"`, 250 * time.Millisecond, ""},
		{`"1s"`, time.Second, ""},
		{`"1m30s"`, 90 * time.Second, ""},
		{`"1h"`, time.Hour, ""},
		{`"0s"`, 0, ""},
		{`"0"`, 0, ""},
		{`"30"`, 0, "Invalid duration"},
		{`"5 s"`, 0, "Invalid duration"},
		{`"five"`, 0, "Invalid duration"},
		{`""`, 0, "Invalid duration"},
		{`"-1s"`, 0, `"-1s" is out of range (0s..2562047h47m16.854775807s)`},
		{`"100000000h"`, 0, `Duration out of range: drain_timeout: "100000000h" is out of range (0s..2562047h47m16.854775807s)`},
		{`"-100000000h"`, 0, "out of range (0s.."},
		{`"2562047h47m16.854775807s"`, 1<<63 - 1, ""},
		{`"1.5h"`, 90 * time.Minute, ""},
		{`".5s"`, 500 * time.Millisecond, ""},
		{`"1e3s"`, 0, "Invalid duration"},
		{`"h"`, 0, "Invalid duration"},
		{`30`, 0, "Invalid duration"},
		{`true`, 0, "Invalid duration"},
		{`["1s"]`, 0, "Invalid value type"},
	}
	for _, tt := range tests {
		src := "drain_timeout = " + tt.val + "\n" + testListener
		cfg, diags := Parse("d.hcl", []byte(src))
		if tt.err == "" {
			if diags.HasErrors() || cfg.DrainTimeout != tt.want {
				t.Errorf("%s: got %v, %s", tt.val, cfg, linesOf(diags))
			}
			continue
		}
		got := linesOf(diags)
		if !strings.Contains(got, tt.err) || !strings.Contains(got, "d.hcl:1:17: ") || !strings.Contains(got, "drain_timeout") {
			t.Errorf("%s: diagnostics %q, want %q at d.hcl:1:17 naming drain_timeout", tt.val, got, tt.err)
		}
	}

	// Bounded durations.
	for val, ok := range map[string]bool{`"1s"`: true, `"10m"`: true, `"999ms"`: false, `"10m1s"`: false} {
		_, diags := Parse("w.hcl", []byte("consul {\n  wait = "+val+"\n}\n"+testListener))
		if diags.HasErrors() == ok {
			t.Errorf("wait = %s: %s", val, linesOf(diags))
		}
	}
	for _, zero := range []string{"connect", "response_header", "idle", "body_idle"} {
		got := parseErrors(t, testListener+`upstream "u" {
  route {}
  backend "a" { address = "x:1" }
  timeouts { `+zero+` = "0s" }
}`)
		if !strings.Contains(got, `"0s" is out of range (greater than 0s, at most 2562047h47m16.854775807s)`) || !strings.Contains(got, zero) {
			t.Errorf("%s = 0s: %s", zero, got)
		}
	}
}

func TestValues(t *testing.T) {
	cfg := mustParse(t, `
log_level     = "DEBUG"
log_json      = true
drain_timeout = "2s"
`+testListener+`
upstream "web" {
  route {
    host        = "*.Example.com"
    path_prefix = "/api/"
    methods     = ["GET", "HEAD"]
  }
  route {
    host = "[::1]"
  }
  backend "a" {
    address = "[::1]:9443"
    weight  = 1
  }
  tls {
    ca_file     = "testdata/certs/ca.pem"
    cert_file   = "testdata/certs/cert.pem"
    key_file    = "testdata/certs/key.pem"
    server_name = "backend.internal"
  }
}`)
	if cfg.LogLevel != "debug" || !cfg.LogJSON || cfg.DrainTimeout != 2*time.Second {
		t.Errorf("globals: %q %v %v", cfg.LogLevel, cfg.LogJSON, cfg.DrainTimeout)
	}
	u := cfg.Upstreams[0]
	if r := u.Routes[0]; r.Host != "*.example.com" || r.PathPrefix != "/api/" || !reflect.DeepEqual(r.Methods, []string{"GET", "HEAD"}) {
		t.Errorf("route = %+v", r)
	}
	if u.Routes[1].Host != "::1" {
		t.Errorf("route 2 host = %q", u.Routes[1].Host)
	}
	if b := u.Backends[0]; b.Scheme != "https" || b.Host != "::1" || b.Port != 9443 || b.Weight != 1 {
		t.Errorf("backend = %+v", b)
	}
	if u.TLS == nil || u.TLS.ServerName != "backend.internal" || u.TLS.CAFile != "testdata/certs/ca.pem" {
		t.Errorf("tls = %+v", u.TLS)
	}
}

func TestConsulEnvironment(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		body string
		want Consul
		err  string
	}{
		{name: "defaults", want: Consul{Address: "127.0.0.1:8500", Scheme: "http"}},
		{
			name: "env",
			env:  map[string]string{EnvConsulAddr: "consul:8501", EnvConsulSSL: "true", EnvConsulToken: "tok"},
			want: Consul{Address: "consul:8501", Scheme: "https", Token: "tok"},
		},
		{
			name: "env address prefix",
			env:  map[string]string{EnvConsulAddr: "https://consul:8501", EnvConsulTokenFile: "/run/token", EnvConsulToken: "ignored"},
			want: Consul{Address: "consul:8501", Scheme: "https", TokenFile: "/run/token"},
		},
		{
			name: "file wins",
			env:  map[string]string{EnvConsulAddr: "consul:8501", EnvConsulSSL: "true", EnvConsulToken: "env"},
			body: `address = "10.0.0.1:8500"
  scheme = "http"
  token = "file"`,
			want: Consul{Address: "10.0.0.1:8500", Scheme: "http", Token: "file"},
		},
		{
			name: "file address prefix",
			body: `address = "https://10.0.0.1:8501"`,
			want: Consul{Address: "10.0.0.1:8501", Scheme: "https"},
		},
		{
			name: "token file blocks env token",
			env:  map[string]string{EnvConsulToken: "env"},
			body: `token_file = "testdata/certs/ca.pem"`,
			want: Consul{Address: "127.0.0.1:8500", Scheme: "http", TokenFile: "testdata/certs/ca.pem"},
		},
		{name: "bad env address", env: map[string]string{EnvConsulAddr: "consul"}, err: "CONSUL_HTTP_ADDR"},
		{name: "conflicting scheme", body: "address = \"https://c:1\"\n  scheme = \"http\"", err: "Conflicting Consul scheme"},
		{name: "missing token file", body: `token_file = "testdata/nope"`, err: "File not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLoader()
			l.LookupEnv = func(k string) (string, bool) {
				v, ok := tt.env[k]
				return v, ok
			}
			cfg, diags := l.Parse("c.hcl", []byte("consul {\n  "+tt.body+"\n}\n"+testListener))
			if tt.err != "" {
				if got := linesOf(diags); !strings.Contains(got, tt.err) {
					t.Errorf("diagnostics %q, want %q", got, tt.err)
				}
				return
			}
			if diags.HasErrors() {
				t.Fatal(linesOf(diags))
			}
			tt.want.Wait, tt.want.MaxStaleness, tt.want.ResyncGrace = DefaultConsulWait, 2*DefaultConsulWait, DefaultResyncGrace
			got := *cfg.Consul
			got.TokenFileRange = hcl2.Range{} // a source range, not a setting
			if got != tt.want {
				t.Errorf("consul = %+v, want %+v", *cfg.Consul, tt.want)
			}
		})
	}

	// The package-level LookupEnv is used when the Loader has none.
	old := LookupEnv
	defer func() { LookupEnv = old }()
	LookupEnv = func(k string) (string, bool) {
		if k == EnvConsulAddr {
			return "from-env:8500", true
		}
		return "", false
	}
	cfg := mustParse(t, "consul {}\n"+testListener)
	if cfg.Consul.Address != "from-env:8500" {
		t.Errorf("address = %q", cfg.Consul.Address)
	}
}

// TestConsulTLSWithoutHTTPS: a consul tls block that sets something while
// the scheme is http (no https:// address, scheme or CONSUL_HTTP_SSL) would
// be silently unused: a warning at the block says how to turn HTTPS on. An
// https scheme from any source, or an empty block, draws none.
func TestConsulTLSWithoutHTTPS(t *testing.T) {
	const warn = `c.hcl:3:3: warning: TLS not used: consul scheme: "http", so the consul tls settings are not used; write address = "https://...", scheme = "https", or set CONSUL_HTTP_SSL=true.`
	for _, tt := range []struct {
		name, body string
		env        map[string]string
		warned     bool
	}{
		{name: "host:port", body: `address = "127.0.0.1:8501"`, warned: true},
		{name: "http prefix", body: `address = "http://127.0.0.1:8501"`, warned: true},
		{name: "https prefix", body: `address = "https://127.0.0.1:8501"`},
		{name: "scheme", body: `scheme = "https"`},
		{name: "CONSUL_HTTP_SSL", body: `address = "127.0.0.1:8501"`, env: map[string]string{EnvConsulSSL: "true"}},
		{name: "CONSUL_HTTP_ADDR", body: `wait = "5m"`, env: map[string]string{EnvConsulAddr: "https://127.0.0.1:8501"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLoader()
			l.LookupEnv = func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			src := "consul {\n  " + tt.body + "\n  tls {\n    ca_file = \"testdata/certs/ca.pem\"\n  }\n}\n" + testListener
			_, diags := l.Parse("c.hcl", []byte(src))
			if diags.HasErrors() {
				t.Fatal(linesOf(diags))
			}
			if got := linesOf(diags); strings.Contains(got, warn) != tt.warned {
				t.Errorf("diagnostics %q; want the warning: %v", got, tt.warned)
			}
		})
	}
	if _, diags := NewLoader().Parse("c.hcl", []byte("consul {\n  tls {}\n}\n"+testListener)); len(diags) != 0 {
		t.Errorf("an empty tls block: %q", linesOf(diags))
	}
}

func TestImplicitConsul(t *testing.T) {
	cfg := mustParse(t, testListener+`
upstream "web" {
  route {}
  consul {
    service = "web"
    health  = "warning"
    scheme  = "http"
    tags    = ["a", "b"]
  }
}`)
	if cfg.Consul == nil || cfg.Consul.Address != DefaultConsulAddress || cfg.Consul.Wait != DefaultConsulWait {
		t.Fatalf("Consul = %+v", cfg.Consul)
	}
	want := UpstreamConsul{Service: "web", Tags: []string{"a", "b"}, Health: "warning", Scheme: "http"}
	if !reflect.DeepEqual(*cfg.Upstreams[0].Consul, want) {
		t.Errorf("upstream consul = %+v", cfg.Upstreams[0].Consul)
	}
}

func TestMergeDirectory(t *testing.T) {
	cfg, diags := Load([]string{"testdata/merge/dir", "testdata/merge/extra.hcl"})
	if diags.HasErrors() {
		t.Fatal(linesOf(diags))
	}
	wantFiles := []string{
		filepath.Join("testdata/merge/dir", "10-base.hcl"),
		filepath.Join("testdata/merge/dir", "20-web.hcl"),
		filepath.Join("testdata/merge/dir", "30-api.hcl"),
		"testdata/merge/extra.hcl",
	}
	if !reflect.DeepEqual(cfg.Files, wantFiles) {
		t.Errorf("Files = %v", cfg.Files)
	}
	if cfg.LogLevel != "debug" || cfg.DrainTimeout != 5*time.Second || cfg.Control.Address != "127.0.0.1:19901" {
		t.Errorf("globals: %q %v %q", cfg.LogLevel, cfg.DrainTimeout, cfg.Control.Address)
	}
	var names []string
	for _, l := range cfg.Listeners {
		names = append(names, l.Name+"@"+filepath.Base(l.Range.Filename))
	}
	if !reflect.DeepEqual(names, []string{"public@10-base.hcl", "internal@extra.hcl"}) {
		t.Errorf("listeners = %v", names)
	}
	names = nil
	for _, u := range cfg.Upstreams {
		names = append(names, u.Name+"@"+filepath.Base(u.Range.Filename))
	}
	if !reflect.DeepEqual(names, []string{"web@20-web.hcl", "api@30-api.hcl", "admin@extra.hcl"}) {
		t.Errorf("upstreams = %v", names)
	}
	if cfg.Upstreams[0].Routes[0].Host != "web.example.com" || cfg.Upstreams[1].Backends[0].Weight != 3 {
		t.Errorf("upstreams = %+v", cfg.Upstreams)
	}
	if cfg.Consul == nil {
		t.Error("admin uses Consul discovery but Config.Consul is nil")
	}

	// The same file twice (directly and through its directory) is read once.
	cfg, diags = Load([]string{"testdata/merge/dir", "testdata/merge/dir/20-web.hcl"})
	if diags.HasErrors() || len(cfg.Files) != 3 {
		t.Errorf("files %v: %s", cfg, linesOf(diags))
	}
}

func TestMergeTwoFiles(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.hcl")
	b := filepath.Join(dir, "b.hcl")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(a, `log_json = true`+testListener)
	write(b, `drain_timeout = "1s"`+testUpstream)
	cfg, diags := Load([]string{b, a})
	if diags.HasErrors() {
		t.Fatal(linesOf(diags))
	}
	if !cfg.LogJSON || cfg.DrainTimeout != time.Second || len(cfg.Listeners) != 1 || len(cfg.Upstreams) != 1 {
		t.Errorf("merged = %+v", cfg)
	}
	if !reflect.DeepEqual(cfg.Files, []string{b, a}) {
		t.Errorf("Files = %v", cfg.Files)
	}

	// A duplicate label names both files.
	write(b, testUpstream)
	write(a, testListener+testUpstream)
	_, diags = Load([]string{a, b})
	got := linesOf(diags)
	if !strings.Contains(got, b+":2:1: Duplicate upstream") || !strings.Contains(got, a+":10:1") {
		t.Errorf("diagnostics:\n%s", got)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := map[string][]string{
		"Cannot read configuration":     {"testdata/does-not-exist.hcl"},
		"Empty configuration directory": {"testdata/certs"},
		"No configuration":              nil,
	}
	for want, paths := range tests {
		cfg, diags := Load(paths)
		if cfg != nil || !strings.Contains(linesOf(diags), want) {
			t.Errorf("Load(%v) = %v, %s; want %q", paths, cfg, linesOf(diags), want)
		}
	}
}

func TestFormatDiagnostics(t *testing.T) {
	l := NewLoader()
	_, diags := l.Load([]string{"testdata/bad/weight_zero.hcl"})
	var buf bytes.Buffer
	if err := l.WriteDiagnostics(&buf, diags, 0, false); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"Error: Value out of range", "on testdata/bad/weight_zero.hcl line 13", `weight  = 0`, `backend "a" weight: 0 is out of range (1..1000000)`} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}

	d := &hcl2.Diagnostic{Severity: hcl2.DiagWarning, Summary: "S", Detail: "line one\n  line two"}
	if got := FormatDiagnostic(d); got != "warning: S: line one line two" {
		t.Errorf("FormatDiagnostic = %q", got)
	}
}

func TestNotYetSupported(t *testing.T) {
	if NotYetSupported("upstream.limits.max_queue") || NotYetSupported("telemetry.dogstatsd_address") || NotYetSupported("consul.register") || NotYetSupported("upstream.health_check") ||
		NotYetSupported("load_balancing.ewma") || NotYetSupported("upstream.hash_on") || NotYetSupported("telemetry.statsd_address") {
		t.Error("NotYetSupported table is off")
	}
}

// controlSettings is c without its source ranges, for comparing values.
func controlSettings(c Control) Control {
	c.AddressRange, c.TokenFileRange = hcl2.Range{}, hcl2.Range{}
	return c
}

// withoutRanges is t without its source ranges, for comparing values.
func withoutRanges(t TLS) TLS {
	t.CAFileRange, t.CertFileRange, t.KeyFileRange = hcl2.Range{}, hcl2.Range{}, hcl2.Range{}
	return t
}

func TestFullExample(t *testing.T) {
	cfg, diags := Load([]string{"testdata/good/full.hcl"})
	if diags.HasErrors() {
		t.Fatal(linesOf(diags))
	}
	c := cfg.Consul
	if c == nil || c.Address != "127.0.0.1:8500" || c.Scheme != "http" || c.Wait != 5*time.Minute || c.Stale || c.ResyncGrace != 30*time.Second ||
		c.TLS == nil || withoutRanges(*c.TLS) != (TLS{}) || c.Register == nil || c.Register.Service != "impulse-agent" ||
		c.MaxStaleness != 2*DefaultConsulWait || c.Catalog == nil || c.CatalogEnabled() || c.Catalog.TagPrefix != DefaultCatalogTagPrefix {
		t.Errorf("consul = %+v", c)
	}
	// Every value the file writes is the default, except where its comments
	// say otherwise (route host, catalog enabled, the listener).
	if d := Default(); cfg.LogLevel != d.LogLevel || cfg.DrainTimeout != d.DrainTimeout || controlSettings(cfg.Control) != d.Control || !cfg.Telemetry.Equal(d.Telemetry) || cfg.Paths != d.Paths {
		t.Errorf("globals differ from Default(): %+v", cfg)
	}
	l := cfg.Listeners[0]
	lt := l.TLS
	if l.Name != "public" || l.Address != "0.0.0.0:8443" || !slices.Equal(l.Protocols, []string{"h1", "h2", "h3"}) || l.AltSvcPort != 0 || l.AltSvcMaxAge != 24*time.Hour || l.EarlyData ||
		lt.CertFile != "testdata/certs/cert.pem" || lt.KeyFile != "testdata/certs/key.pem" || lt.ClientAuth != DefaultClientAuth ||
		lt.ClientCAFile != "" || lt.ForwardClientCert || len(lt.Certificates) != 1 ||
		lt.Certificates[0].CertFile != "testdata/certs/a.test.pem" || lt.Certificates[0].KeyFile != "testdata/certs/a.test-key.pem" ||
		lt.Certificates[0].CertFileRange.Start.Line != 69 || lt.CertFileRange.Start.Line != 63 {
		t.Errorf("listener = %+v", l)
	}
	u := cfg.Upstreams[0]
	if u.Name != "web" || u.Routes[0].Host != "web.example.com" || len(u.Routes[0].Methods) != 0 ||
		u.Backends[0].Scheme != "http" || u.Backends[0].Port != 8080 || u.Backends[0].Weight != 100 ||
		u.Consul.Service != "web" || u.Consul.Scheme != "https" || u.Consul.Health != "passing" ||
		*u.HealthCheck != (HealthCheck{Path: DefaultHealthCheckPath, Interval: DefaultHealthCheckInterval, Timeout: DefaultHealthCheckTimeout,
			HealthyThreshold: DefaultHealthyThreshold, UnhealthyThreshold: DefaultUnhealthyThreshold, UnknownIsHealthy: true}) ||
		*u.OutlierDetection != (OutlierDetection{true, DefaultConsecutiveFailures, DefaultBaseEjectionTime, DefaultMaxEjectionPercent}) ||
		u.LoadBalancing != DefaultLoadBalancing || u.SlowStart != 0 || u.TLS == nil || u.Timeouts != DefaultTimeouts() {
		t.Errorf("upstream = %+v", u)
	}
	if !reflect.DeepEqual(u.Retry, DefaultRetry()) || u.Hedge != nil {
		t.Errorf("retry = %+v, hedge %+v; want the defaults", u.Retry, u.Hedge)
	}
	if l.Limits != DefaultListenerLimits() || u.Limits != (UpstreamLimits{}) || cfg.Limits != (GlobalLimits{}) {
		t.Errorf("limits = %+v, %+v, %+v; want the defaults", l.Limits, u.Limits, cfg.Limits)
	}
	if u.Range.Start.Line != 95 || u.Routes[0].Range.Start.Line != 100 || u.Backends[0].Range.Start.Line != 128 {
		t.Errorf("ranges: %v %v %v", u.Range, u.Routes[0].Range, u.Backends[0].Range)
	}
	if c := cfg.Upstreams[len(cfg.Upstreams)-1]; c.Name != "canary" || len(c.Backends) != 0 || u.Routes[0].Sticky != "" || u.Routes[0].Splits != nil ||
		!slices.Equal(c.Routes[0].Splits, []Split{{"web", 90, c.Routes[0].Splits[0].Range}, {"admin", 10, c.Routes[0].Splits[1].Range}}) || c.Routes[0].Sticky != "cookie:session" {
		t.Errorf("canary = %+v", c)
	}
}

func TestSlowStart(t *testing.T) {
	cfg := mustParse(t, testListener+`
upstream "web" {
  slow_start = "30s"
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}`)
	if got := cfg.Upstreams[0].SlowStart; got != 30*time.Second {
		t.Fatalf("slow_start = %v", got)
	}
	_, diags := Parse("bad.hcl", []byte(testListener+`
upstream "web" {
  slow_start = "2h"
  route {}
  backend "a" {
    address = "http://127.0.0.1:8080"
  }
}`))
	if !diags.HasErrors() || !strings.Contains(diags.Error(), "slow_start") {
		t.Fatalf("slow_start = 2h: %v", diags)
	}
}

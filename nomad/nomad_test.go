// Package nomad holds example Nomad job specifications for impulse-agent;
// its test keeps them valid HCL, checks the parts of Nomad's job schema they
// rely on, and keeps their embedded gateway configuration valid for
// impulse-agent as a node would render it.
package nomad

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

var (
	heredoc  = regexp.MustCompile(`(?s)destination\s*=\s*"local/gateway.hcl".*?<<-EOT\n(.*?)\n\s*EOT`)
	template = regexp.MustCompile(`\{\{[^}]*\}\}`)
)

// maxKillTimeout is the Nomad client's default max_kill_timeout: a longer
// kill_timeout is silently cut to it.
const maxKillTimeout = 30 * time.Second

// hostIP stands for the node address Nomad puts in NOMAD_ADDR_* and
// NOMAD_IP_* (TEST-NET-1, RFC 5737).
const hostIP = "192.0.2.10"

// render replaces the Nomad template expressions of a gateway.hcl with the
// values a node would render: the secrets directory, a host address for
// NOMAD_ADDR_*, a port for anything else.
func render(src, secrets string) string {
	return template.ReplaceAllStringFunc(src, func(s string) string {
		switch {
		case strings.Contains(s, "SECRETS_DIR"):
			return secrets
		case strings.Contains(s, "NOMAD_ADDR"):
			return hostIP + ":27000"
		default:
			return "8080"
		}
	})
}

func blocks(b *hclsyntax.Body, typ string) []*hclsyntax.Block {
	var out []*hclsyntax.Block
	for _, bl := range b.Blocks {
		if bl.Type == typ {
			out = append(out, bl)
		}
	}
	return out
}

func str(t *testing.T, b *hclsyntax.Body, name string) string {
	t.Helper()
	a := b.Attributes[name]
	if a == nil {
		return ""
	}
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() || v.Type() != cty.String {
		t.Fatalf("%s: want a string: %s", name, diags.Error())
	}
	return v.AsString()
}

func TestJobSpecs(t *testing.T) {
	files, _ := filepath.Glob("*.nomad.hcl")
	if len(files) == 0 {
		t.Fatal("no job specs")
	}
	hcl.LookupEnv = func(string) (string, bool) { return "", false } // a node without CONSUL_HTTP_*
	// The configuration check loads the certificate and key: they must be
	// real and match.
	dir := t.TempDir()
	cert, err := selfsigned.New("localhost")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"cert.pem": cert.CertPEM, "key.pem": cert.KeyPEM, "control-token": []byte("s3cret\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, diags := hclparse.NewParser().ParseHCL(src, f)
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			m := heredoc.FindSubmatch(src)
			if m == nil {
				t.Fatal("no embedded gateway.hcl")
			}
			cfg, cdiags := hcl.Parse(f+":gateway.hcl", []byte(render(string(m[1]), dir)))
			if cdiags.HasErrors() {
				t.Fatalf("embedded gateway.hcl: %s\n%s", cdiags.Error(), render(string(m[1]), dir))
			}
			checkJob(t, file, string(m[1]), cfg)
		})
	}
}

// checkJob checks what the examples promise: a /v1/ready check that can
// pass, kill_timeout within Nomad's default limit and above drain_timeout,
// Consul reached where a default agent listens.
func checkJob(t *testing.T, file *hcl2.File, gatewayHCL string, cfg *hcl.Config) {
	jobs := blocks(file.Body.(*hclsyntax.Body), "job")
	if len(jobs) != 1 {
		t.Fatalf("%d job blocks, want 1", len(jobs))
	}
	groups := blocks(jobs[0].Body, "group")
	if len(groups) == 0 {
		t.Fatal("no group")
	}
	ready := false
	for _, g := range groups {
		for _, svc := range blocks(g.Body, "service") {
			for _, chk := range blocks(svc.Body, "check") {
				if str(t, chk.Body, "type") != "http" || str(t, chk.Body, "path") != "/v1/ready" {
					continue
				}
				port := str(t, chk.Body, "port")
				// Consul runs the check against the node address of
				// that port: the control API must bind it, not loopback.
				if !strings.Contains(gatewayHCL, `env "NOMAD_ADDR_`+port+`"`) {
					t.Errorf("the /v1/ready check uses port %q, but control.address is not NOMAD_ADDR_%s", port, port)
				}
				ready = true
			}
		}
		for _, task := range blocks(g.Body, "task") {
			kill := maxKillTimeout
			if s := str(t, task.Body, "kill_timeout"); s != "" {
				var err error
				if kill, err = time.ParseDuration(s); err != nil {
					t.Fatal(err)
				}
			}
			if kill > maxKillTimeout {
				t.Errorf("task %s: kill_timeout %s exceeds Nomad's default max_kill_timeout %s (it would be cut)", task.Labels[0], kill, maxKillTimeout)
			}
			if len(blocks(task.Body, "artifact")) > 0 && cfg.DrainTimeout >= kill {
				t.Errorf("task %s: drain_timeout %s must be below kill_timeout %s", task.Labels[0], cfg.DrainTimeout, kill)
			}
		}
	}
	if !ready {
		t.Error("no service check of type http on /v1/ready")
	}
	if cfg.Consul != nil && cfg.Consul.Address != hcl.DefaultConsulAddress {
		t.Errorf("consul address %q: a default Consul agent listens on %s (or set CONSUL_HTTP_ADDR)", cfg.Consul.Address, hcl.DefaultConsulAddress)
	}
	if !hcl.IsLoopbackAddress(cfg.Control.Address) && cfg.Control.TokenFile == "" {
		t.Errorf("control API on %s without token_file", cfg.Control.Address)
	}
}

// Package nomad holds example Nomad job specifications for impulse-agent;
// its test keeps them syntactically valid HCL and their embedded gateway
// configuration valid for impulse-agent.
package nomad

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/impulse-agent/impulse-agent/hcl"
	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

var (
	heredoc  = regexp.MustCompile(`(?s)destination\s*=\s*"local/gateway.hcl".*?<<-EOT\n(.*?)\n\s*EOT`)
	template = regexp.MustCompile(`\{\{[^}]*\}\}`)
)

func TestJobSpecs(t *testing.T) {
	files, _ := filepath.Glob("*.nomad.hcl")
	if len(files) == 0 {
		t.Fatal("no job specs")
	}
	// The configuration check loads the certificate and key: they must be
	// real and match.
	dir := t.TempDir()
	cert, err := selfsigned.New("localhost")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"cert.pem": cert.CertPEM, "key.pem": cert.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, diags := hclparse.NewParser().ParseHCL(src, f); diags.HasErrors() {
			t.Errorf("%s: %s", f, diags.Error())
		}
		m := heredoc.FindSubmatch(src)
		if m == nil {
			t.Errorf("%s: no embedded gateway.hcl", f)
			continue
		}
		// Replace Nomad template expressions with values a node would render.
		cfg := template.ReplaceAllStringFunc(string(m[1]), func(s string) string {
			switch {
			case strings.Contains(s, "SECRETS_DIR"):
				return dir
			case strings.Contains(s, "NOMAD_ADDR"):
				return "127.0.0.1:0"
			default:
				return "8080"
			}
		})
		cfg = strings.ReplaceAll(cfg, "\"8080:8500\"", "\"127.0.0.1:8500\"")
		if _, diags := hcl.Parse(f+":gateway.hcl", []byte(cfg)); diags.HasErrors() {
			t.Errorf("%s: embedded gateway.hcl: %s\n%s", f, diags.Error(), cfg)
		}
	}
}

package hcl

import (
	"strings"
	"testing"
)

// TestSecurityNoFunctionsOrVariables backs SECURITY.md's claim that the
// configuration reads files only where an attribute names one (cert_file,
// key_file, ca_file, token_file, ...): expressions have no functions
// (file, templatefile, ...) and no variables (env, var), so a config value
// can never pull in another file or the environment. Each such expression
// is an error, and the error does not carry the file's content.
func TestSecurityNoFunctionsOrVariables(t *testing.T) {
	for _, expr := range []string{
		`file("/etc/passwd")`,
		`templatefile("/etc/passwd", {})`,
		`env.HOME`,
		`var.secret`,
		`"${file("/etc/passwd")}"`,
		`"${env.HOME}"`,
	} {
		src := strings.Replace(testListener, `"testdata/certs/cert.pem"`, expr, 1) + testUpstream
		got := parseErrors(t, src)
		if !strings.Contains(got, "cert_file") && !strings.Contains(got, "test.hcl:5") {
			t.Errorf("%s: the error does not name the attribute:\n%s", expr, got)
		}
		if strings.Contains(got, "root:") {
			t.Errorf("%s: the error carries the file's content:\n%s", expr, got)
		}
	}
}

package nomad

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"text/template"

	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/impulse-agent/impulse-agent/internal/selfsigned"
)

// rendered is one template's output.
type rendered struct {
	content string
	fromVar bool // its data reads a Nomad variable (nomadVar)
}

// varPut finds the job's documented `nomad var put nomad/jobs/<job> k=v ...`
// command (a comment, lines joined by a trailing backslash) and returns its
// keys.
var varPut = regexp.MustCompile(`#\s*nomad var put (\S+)((?:[^\n]*\\\n#)*[^\n]*)`)
var varKey = regexp.MustCompile(`\s([a-z_]+)=`)

// fakeItems are the values the test stores under the keys the job
// documents: a certificate and its key that load, a token.
func fakeItems(t *testing.T, j *job) (string, map[string]string) {
	t.Helper()
	m := varPut.FindSubmatch(j.src)
	if m == nil {
		t.Fatalf("%s documents no `nomad var put` command for its variable", j.file)
	}
	cert, err := selfsigned.New("localhost")
	if err != nil {
		t.Fatal(err)
	}
	fakes := map[string]string{"cert": string(cert.CertPEM), "key": string(cert.KeyPEM), "control_token": "s3cret"}
	items := map[string]string{}
	for _, k := range varKey.FindAllStringSubmatch(string(m[2]), -1) {
		v, ok := fakes[k[1]]
		if !ok {
			t.Fatalf("the test has no fake value for variable key %q", k[1])
		}
		items[k[1]] = v
	}
	return string(m[1]), items
}

// renderTemplates renders the task's templates as Nomad's consul-template
// would, into root (standing for the task directory): env reads env (an
// undefined NOMAD_* name fails the test), nomadVar returns the fake items
// of the documented variable, which must be one the task reads without an
// ACL policy (nomad/jobs/<job>[/<group>[/<task>]]). It returns the
// outputs by destination.
func renderTemplates(t *testing.T, j *job, group string, task *hclsyntax.Block, env map[string]string, root string) map[string]rendered {
	t.Helper()
	varPath, items := fakeItems(t, j)
	implicit := []string{"nomad/jobs/" + j.name, "nomad/jobs/" + j.name + "/" + group, "nomad/jobs/" + j.name + "/" + group + "/" + task.Labels[0]}
	out := map[string]rendered{}
	for _, tb := range blocks(task.Body, "template") {
		dest := path.Clean(j.str(t, tb.Body, "destination", env))
		data := j.str(t, tb.Body, "data", env)
		if !strings.HasPrefix(dest, "local/") && !strings.HasPrefix(dest, "secrets/") && !strings.HasPrefix(dest, "alloc/") {
			t.Errorf("template %s: destination outside local/, secrets/ and alloc/", dest)
		}
		usedVar := false
		funcs := template.FuncMap{
			"env": func(name string) (string, error) {
				v, ok := env[name]
				if !ok && strings.HasPrefix(name, "NOMAD_") {
					return "", fmt.Errorf("%s is not defined for task %s", name, task.Labels[0])
				}
				return v, nil
			},
			"nomadVar": func(p string) (map[string]string, error) {
				usedVar = true
				switch {
				case p != varPath:
					return nil, fmt.Errorf("nomadVar %q: the job documents %q", p, varPath)
				case !contains(implicit, p):
					return nil, fmt.Errorf("nomadVar %q: the task reads only %v without an ACL policy", p, implicit)
				}
				return items, nil
			},
		}
		tmpl := template.New(dest).Funcs(funcs)
		if tb.Body.Attributes["error_on_missing_key"] != nil {
			tmpl = tmpl.Option("missingkey=error")
		}
		tmpl, err := tmpl.Parse(data)
		if err != nil {
			t.Errorf("template %s: %v", dest, err)
			continue
		}
		var b strings.Builder
		if err := tmpl.Execute(&b, nil); err != nil {
			t.Errorf("template %s: %v", dest, err)
			continue
		}
		if usedVar && tb.Body.Attributes["error_on_missing_key"] == nil {
			t.Errorf("template %s reads a Nomad variable without error_on_missing_key: a missing key would render \"<no value>\"", dest)
		}
		file := filepath.Join(root, filepath.FromSlash(dest))
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		out[dest] = rendered{content: b.String(), fromVar: usedVar}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Package nomad holds example Nomad job specifications for impulse-agent.
// Its tests check what can be checked without a Nomad binary (Nomad's module
// is not served): HCL syntax and formatting, the parts of the job schema the
// files use (schema_test.go), every NOMAD_* variable and port label they
// use, that every binary comes from an artifact, and the gateway
// configuration as a node would render it (render_test.go): its files come
// from Nomad variables, its control API is protected, its readiness check can
// pass, its timeouts fit Nomad's.
package nomad

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	hcl2 "github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"

	"github.com/impulse-agent/impulse-agent/hcl"
)

// maxKillTimeout is the Nomad client's default max_kill_timeout: a longer
// kill_timeout is silently cut to it.
const maxKillTimeout = 30 * time.Second

// hostIP stands for the node address Nomad puts in NOMAD_ADDR_* and
// NOMAD_IP_* (TEST-NET-1, RFC 5737).
const hostIP = "192.0.2.10"

// job is one parsed job file.
type job struct {
	file string
	name string
	body *hclsyntax.Body
	vars map[string]cty.Value // variable defaults
	src  []byte
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

func block(b *hclsyntax.Body, typ string) *hclsyntax.Block {
	if bs := blocks(b, typ); len(bs) > 0 {
		return bs[0]
	}
	return nil
}

// eval evaluates expr as Nomad would: var.NAME from the variable defaults,
// NOMAD_* (runtime interpolation, "${NOMAD_PORT_app}") from env. Any other
// reference, an undeclared variable or a NOMAD_* name env does not define
// is an error.
func (j *job) eval(t *testing.T, expr hclsyntax.Expression, env map[string]string) (cty.Value, bool) {
	t.Helper()
	vars := map[string]cty.Value{"var": cty.ObjectVal(j.vars)}
	ok := true
	for _, tr := range expr.Variables() {
		root := tr.RootName()
		switch {
		case root == "var":
			if len(tr) < 2 {
				t.Errorf("%s: bare var", tr.SourceRange())
				ok = false
				continue
			}
			if a, isAttr := tr[1].(hcl2.TraverseAttr); !isAttr || j.vars[a.Name] == cty.NilVal {
				t.Errorf("%s: undeclared variable", tr.SourceRange())
				ok = false
			}
		case strings.HasPrefix(root, "NOMAD_"):
			v, defined := env[root]
			if !defined {
				t.Errorf("%s: %s is not defined for this task (no such port label or Nomad variable)", tr.SourceRange(), root)
				ok = false
				continue
			}
			vars[root] = cty.StringVal(v)
		default:
			t.Errorf("%s: reference %q: not a variable nor a NOMAD_* runtime variable", tr.SourceRange(), root)
			ok = false
		}
	}
	if !ok {
		return cty.NilVal, false
	}
	v, diags := expr.Value(&hcl2.EvalContext{Variables: vars})
	if diags.HasErrors() {
		t.Errorf("%s", diags.Error())
		return cty.NilVal, false
	}
	return v, true
}

// str returns the string argument name of b ("" when absent).
func (j *job) str(t *testing.T, b *hclsyntax.Body, name string, env map[string]string) string {
	t.Helper()
	a := b.Attributes[name]
	if a == nil {
		return ""
	}
	v, ok := j.eval(t, a.Expr, env)
	if !ok {
		return ""
	}
	if v.Type() != cty.String {
		t.Errorf("%s: %s: want a string, got %s", a.SrcRange, name, v.Type().FriendlyName())
		return ""
	}
	return v.AsString()
}

func (j *job) strs(t *testing.T, b *hclsyntax.Body, name string, env map[string]string) []string {
	t.Helper()
	a := b.Attributes[name]
	if a == nil {
		return nil
	}
	v, ok := j.eval(t, a.Expr, env)
	if !ok {
		return nil
	}
	if !v.CanIterateElements() {
		t.Errorf("%s: %s: want a list of strings", a.SrcRange, name)
		return nil
	}
	var out []string
	for _, e := range v.AsValueSlice() {
		out = append(out, e.AsString())
	}
	return out
}

// evalAll evaluates every argument under b, so that every NOMAD_* and var
// reference anywhere is checked.
func (j *job) evalAll(t *testing.T, b *hclsyntax.Body, env map[string]string) {
	t.Helper()
	for _, a := range b.Attributes {
		j.eval(t, a.Expr, env)
	}
	for _, bl := range b.Blocks {
		j.evalAll(t, bl.Body, env)
	}
}

func parseJob(t *testing.T, file string) *job {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, diags := hclparse.NewParser().ParseHCL(src, file)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	if formatted := hclwrite.Format(src); !bytes.Equal(formatted, src) {
		t.Errorf("%s is not formatted as `nomad fmt` (hclwrite.Format) would write it", file)
	}
	body := f.Body.(*hclsyntax.Body)
	checkSchema(t, body, "")
	j := &job{file: file, body: body, vars: map[string]cty.Value{}, src: src}
	for _, v := range blocks(body, "variable") {
		def := v.Body.Attributes["default"]
		if def == nil {
			t.Errorf("%s: variable %q has no default: the job would not run as written", v.DefRange(), v.Labels[0])
			j.vars[v.Labels[0]] = cty.StringVal("")
			continue
		}
		val, diags := def.Expr.Value(nil)
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		j.vars[v.Labels[0]] = val
	}
	jobs := blocks(body, "job")
	if len(jobs) != 1 {
		t.Fatalf("%d job blocks, want 1", len(jobs))
	}
	j.name = jobs[0].Labels[0]
	return j
}

// portEnv is the runtime environment of a group's ports: NOMAD_PORT_,
// NOMAD_HOST_PORT_, NOMAD_IP_, NOMAD_HOST_IP_, NOMAD_ADDR_ and
// NOMAD_HOST_ADDR_ for each label; a dynamic port gets a number of Nomad's
// default dynamic range (20000-32000).
func portEnv(t *testing.T, j *job, g *hclsyntax.Block) (map[string]string, map[string]int) {
	t.Helper()
	env, ports := map[string]string{}, map[string]int{}
	net := block(g.Body, "network")
	if net == nil {
		return env, ports
	}
	for i, p := range blocks(net.Body, "port") {
		port := 20000 + i
		if a := p.Body.Attributes["static"]; a != nil {
			v, ok := j.eval(t, a.Expr, nil)
			if !ok || v.Type() != cty.Number {
				t.Fatalf("%s: static: want a number", a.SrcRange)
			}
			n, _ := v.AsBigFloat().Int64()
			port = int(n)
		}
		l := p.Labels[0]
		ports[l] = port
		addr := fmt.Sprintf("%s:%d", hostIP, port)
		for k, v := range map[string]string{"PORT": fmt.Sprint(port), "HOST_PORT": fmt.Sprint(port), "IP": hostIP, "HOST_IP": hostIP, "ADDR": addr, "HOST_ADDR": addr} {
			env["NOMAD_"+k+"_"+l] = v
		}
	}
	return env, ports
}

// taskEnv adds the task's directories and names (Nomad's runtime
// environment, /nomad/docs/reference/runtime-environment-settings) to the
// group's port environment. The directories are under root, standing for
// the task's chroot.
func taskEnv(ports map[string]string, j *job, g, task string, root string) map[string]string {
	env := map[string]string{
		"NOMAD_ALLOC_DIR": filepath.Join(root, "alloc"), "NOMAD_TASK_DIR": filepath.Join(root, "local"),
		"NOMAD_SECRETS_DIR": filepath.Join(root, "secrets"), "NOMAD_JOB_NAME": j.name, "NOMAD_JOB_ID": j.name,
		"NOMAD_GROUP_NAME": g, "NOMAD_TASK_NAME": task, "NOMAD_ALLOC_ID": "5c6328f7-48c5-4d03-bada-91ef2e904d0d",
		"NOMAD_SHORT_ALLOC_ID": "5c6328f7", "NOMAD_ALLOC_NAME": j.name + "." + g + "[0]", "NOMAD_ALLOC_INDEX": "0",
		"NOMAD_DC": "dc1", "NOMAD_REGION": "global", "NOMAD_NAMESPACE": "default", "NOMAD_CPU_LIMIT": "1000",
		"NOMAD_MEMORY_LIMIT": "256",
	}
	for k, v := range ports {
		env[k] = v
	}
	return env
}

func TestJobSpecs(t *testing.T) {
	files, _ := filepath.Glob("*.nomad.hcl")
	if len(files) < 2 {
		t.Fatalf("job specs: %v", files)
	}
	hcl.LookupEnv = func(string) (string, bool) { return "", false } // a node without CONSUL_HTTP_*
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			j := parseJob(t, f)
			gateways := 0
			for _, g := range blocks(blocks(j.body, "job")[0].Body, "group") {
				gateways += checkGroup(t, j, g)
			}
			if gateways == 0 {
				t.Error("no impulse-agent task")
			}
		})
	}
}

// checkGroup checks one group: port labels, every task's binary and
// templates, and the gateway task(s); it returns how many tasks run
// impulse-agent.
func checkGroup(t *testing.T, j *job, g *hclsyntax.Block) int {
	pEnv, ports := portEnv(t, j, g)
	j.evalAll(t, g.Body, taskEnv(pEnv, j, g.Labels[0], "any", "/"))
	services := blocks(g.Body, "service")
	for _, svc := range services {
		for _, b := range append([]*hclsyntax.Block{svc}, blocks(svc.Body, "check")...) {
			if l := j.str(t, b.Body, "port", nil); l != "" {
				if _, ok := ports[l]; !ok {
					t.Errorf("%s: port %q is not a port label of group %q's network", b.DefRange(), l, g.Labels[0])
				}
			}
		}
	}
	if len(services) > 0 && g.Body.Attributes["shutdown_delay"] == nil {
		t.Errorf("group %q has services but no shutdown_delay: Consul would still send clients while the gateway drains (a task's shutdown_delay covers task-level services only)", g.Labels[0])
	}
	n := 0
	for _, task := range blocks(g.Body, "task") {
		root := t.TempDir()
		env := taskEnv(pEnv, j, g.Labels[0], task.Labels[0], root)
		files := renderTemplates(t, j, g.Labels[0], task, env, root)
		cmd := checkBinary(t, j, task, env, files)
		if path.Base(cmd) != "impulse-agent" {
			continue
		}
		n++
		checkGateway(t, j, g, task, env, ports, files)
	}
	return n
}

// checkBinary checks that the task's command comes from one of its
// artifacts and that every -config=FILE argument is a rendered template; it
// returns the command.
func checkBinary(t *testing.T, j *job, task *hclsyntax.Block, env map[string]string, files map[string]rendered) string {
	cfg := block(task.Body, "config")
	if cfg == nil {
		t.Errorf("task %q: no config", task.Labels[0])
		return ""
	}
	cmd := j.str(t, cfg.Body, "command", env)
	var from []string
	for _, a := range blocks(task.Body, "artifact") {
		src, dest, mode := j.str(t, a.Body, "source", env), j.str(t, a.Body, "destination", env), j.str(t, a.Body, "mode", env)
		if dest == "" {
			dest = "local/"
		}
		if !strings.HasPrefix(src, "https://") {
			t.Errorf("task %q: artifact %q: want an https:// source", task.Labels[0], src)
		}
		if mode == "file" {
			from = append(from, path.Clean(dest))
		} else {
			from = append(from, path.Join(dest, path.Base(src)))
		}
	}
	if !slices.Contains(from, path.Clean(cmd)) {
		t.Errorf("task %q: command %q comes from no artifact (artifacts give %v)", task.Labels[0], cmd, from)
	}
	for _, arg := range j.strs(t, cfg.Body, "args", env) {
		if f, ok := strings.CutPrefix(arg, "-config="); ok {
			if _, ok := files[path.Clean(f)]; !ok {
				t.Errorf("task %q: -config=%s is not a template destination", task.Labels[0], f)
			}
		}
	}
	return cmd
}

// checkGateway loads the rendered gateway configuration with the project's
// hcl package and checks it against the job: timeouts within Nomad's, TLS
// material and control token from Nomad variables, a protected control API,
// a readiness check on the port the control API binds, a listener on a port
// of the group (with CAP_NET_BIND_SERVICE below 1024), Consul where a
// default agent listens.
func checkGateway(t *testing.T, j *job, g, task *hclsyntax.Block, env map[string]string, ports map[string]int, files map[string]rendered) {
	name := task.Labels[0]
	cfgArg := ""
	for _, arg := range j.strs(t, block(task.Body, "config").Body, "args", env) {
		if f, ok := strings.CutPrefix(arg, "-config="); ok {
			cfgArg = path.Clean(f)
		}
	}
	src, ok := files[cfgArg]
	if !ok {
		t.Fatalf("task %q: no -config template", name)
	}
	cfg, diags := hcl.Parse(j.file+":"+cfgArg, []byte(src.content))
	if diags.HasErrors() {
		t.Fatalf("rendered %s: %s\n%s", cfgArg, diags.Error(), src.content)
	}
	if len(cfg.Warnings) > 0 {
		t.Errorf("rendered %s has warnings: %v", cfgArg, cfg.Warnings)
	}

	kill := 5 * time.Second // Nomad's default kill_timeout
	if s := j.str(t, task.Body, "kill_timeout", env); s != "" {
		var err error
		if kill, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	if kill > maxKillTimeout {
		t.Errorf("task %s: kill_timeout %s exceeds Nomad's default max_kill_timeout %s (it would be cut)", name, kill, maxKillTimeout)
	}
	if cfg.DrainTimeout >= kill {
		t.Errorf("task %s: drain_timeout %s must be below kill_timeout %s", name, cfg.DrainTimeout, kill)
	}
	if sig := j.str(t, task.Body, "kill_signal", env); sig != "SIGTERM" && sig != "SIGINT" {
		t.Errorf("task %s: kill_signal %q: the agent drains on SIGTERM or SIGINT", name, sig)
	}

	// Secrets: every file the configuration reads comes from a template
	// fed by a Nomad variable.
	secret := func(field, file string) {
		rel, err := filepath.Rel(filepath.Dir(env["NOMAD_SECRETS_DIR"]), file)
		r, ok := files[filepath.ToSlash(rel)]
		switch {
		case err != nil || !ok:
			t.Errorf("%s %q is rendered by no template of task %s", field, file, name)
		case !r.fromVar:
			t.Errorf("%s %q is not rendered from a Nomad variable", field, file)
		case !strings.HasPrefix(filepath.ToSlash(rel), "secrets/"):
			t.Errorf("%s %q: secrets belong in secrets/, the task's private directory", field, file)
		}
	}
	for _, l := range cfg.Listeners {
		if l.TLS.CertFile != "" {
			secret(fmt.Sprintf("listener %q cert_file", l.Name), l.TLS.CertFile)
			secret(fmt.Sprintf("listener %q key_file", l.Name), l.TLS.KeyFile)
		}
	}
	if cfg.Control.TokenFile != "" {
		secret("control token_file", cfg.Control.TokenFile)
	} else if !hcl.IsLoopbackAddress(cfg.Control.Address) {
		t.Errorf("control API on %s without token_file", cfg.Control.Address)
	}

	// Readiness: an HTTP check on /v1/ready (it answers without the
	// token, status only) on the port the control API binds.
	ready := false
	for _, svc := range append(blocks(g.Body, "service"), blocks(task.Body, "service")...) {
		for _, chk := range blocks(svc.Body, "check") {
			if j.str(t, chk.Body, "type", env) != "http" || j.str(t, chk.Body, "path", env) != "/v1/ready" {
				continue
			}
			ready = true
			port := j.str(t, chk.Body, "port", env)
			if want := env["NOMAD_ADDR_"+port]; cfg.Control.Address != want {
				t.Errorf("the /v1/ready check runs on port %q (%s), the control API binds %s", port, want, cfg.Control.Address)
			}
		}
		// The service's port is a listener's.
		if p, ok := ports[j.str(t, svc.Body, "port", env)]; ok && !listensOn(cfg, p) {
			t.Errorf("service %q: port %d is no listener's", j.str(t, svc.Body, "name", env), p)
		}
	}
	if !ready {
		t.Error("no service check of type http on /v1/ready")
	}

	caps := j.strs(t, block(task.Body, "config").Body, "cap_add", env)
	for _, l := range cfg.Listeners {
		p := portOf(t, l.Address)
		if !slices.Contains(slices.Collect(maps.Values(ports)), p) {
			t.Errorf("listener %q binds %s: not a port of the group's network", l.Name, l.Address)
		}
		if p < 1024 && !slices.Contains(caps, "net_bind_service") && j.str(t, task.Body, "user", env) != "root" {
			t.Errorf("listener %q binds port %d as the exec driver's default user nobody without cap_add net_bind_service", l.Name, p)
		}
	}

	if cfg.Consul != nil {
		if cfg.Consul.Address != hcl.DefaultConsulAddress {
			t.Errorf("consul address %q: a default Consul agent listens on %s (or set CONSUL_HTTP_ADDR)", cfg.Consul.Address, hcl.DefaultConsulAddress)
		}
		if net := block(g.Body, "network"); net != nil && j.str(t, net.Body, "mode", env) != "host" && j.str(t, net.Body, "mode", env) != "" {
			t.Errorf("the Consul agent on the node's loopback needs network mode host")
		}
	}
}

func listensOn(cfg *hcl.Config, port int) bool {
	for _, l := range cfg.Listeners {
		if portOf(nil, l.Address) == port {
			return true
		}
	}
	return false
}

func portOf(t *testing.T, addr string) int {
	var p int
	if _, err := fmt.Sscan(addr[strings.LastIndex(addr, ":")+1:], &p); err != nil && t != nil {
		t.Errorf("address %q: %v", addr, err)
	}
	return p
}
